#!/usr/bin/env bash
# ctest's torch tests: tests/python/test_capture.py with the Python of scripts/torch-venv's venv
# ($ATTNLAB_TORCH_PYTHON overrides). Exit 77 (ctest: Skipped, with the reason printed) when there
# is no such venv or it does not import torch, numpy and transformers.
# Usage: run.sh ATTNLAB_BINARY
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export ATTNLAB_BINARY="$1"
py="${ATTNLAB_TORCH_PYTHON:-${ATTNLAB_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/attnlab/torch-venv}/bin/python}"
if [ ! -x "$py" ] || ! "$py" -c 'import torch, numpy, transformers' 2>/dev/null; then
  echo "SKIP: no Python with torch, numpy and transformers at $py (scripts/test makes it with scripts/torch-venv; pip could not reach PyPI?)"
  exit 77
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
cd "$here" && exec "$py" -m unittest -v test_capture 2>&1 < /dev/null
