#!/usr/bin/env bash
# ctest's torch tests: a unittest module of tests/python (test_capture by default; test_backward,
# test_random_torch)
# with the Python of scripts/torch-venv's venv ($ATTNLAB_TORCH_PYTHON overrides). Exit 77 (ctest:
# Skipped, with the reason printed) when there is no such venv or it does not import what the
# module needs (torch and numpy; test_capture also transformers).
# Usage: run.sh ATTNLAB_BINARY [MODULE]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export ATTNLAB_BINARY="$1"
module="${2:-test_capture}"
needs="torch, numpy"
if [ "$module" = test_capture ]; then needs="torch, numpy, transformers"; fi
py="${ATTNLAB_TORCH_PYTHON:-${ATTNLAB_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/attnlab/torch-venv}/bin/python}"
if [ ! -x "$py" ] || ! "$py" -c "import $needs" 2>/dev/null; then
  echo "SKIP: no Python with $needs at $py (scripts/test makes it with scripts/torch-venv; pip could not reach PyPI?)"
  exit 77
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
cd "$here" && exec "$py" -m unittest -v "$module" 2>&1 < /dev/null
