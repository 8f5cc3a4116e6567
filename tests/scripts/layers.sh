#!/usr/bin/env bash
# The layers point one way: every project #include of the tree is checked against the folders its
# file may include (a test, label core). Usage: layers.sh SOURCE_DIR. Prints each include that
# runs the wrong way (file:line: include) and exits 1 when there is one.
#   core/            core/ only: the problem, checks and texts know no backend
#   cpu/, kernels/   core/ and their own folder
#   engine/          core/, cpu/, kernels/ and engine/: the composition above the backends
#   cli/             everything below the programs (not viewer/)
#   tests/core/      core/ and tests/test_util.h: core's tests run without any backend
#   viewer/draw/     core/ and viewer/draw/: pixels, colours, fonts, text, no state of the lab
#   viewer/session/  core/, engine/, cpu/ (the fp64 reference), viewer/draw/, viewer/session/
#   viewer/ui/       core/, viewer/draw/, viewer/session/ and viewer/ui/: the ImGui kit and the shell
#   viewer/views/X/  as the session, plus viewer/views/view.h and its own folder; its panel*.cpp
#                    also viewer/ui/ (the kit it draws with): a view never includes another view
#                    nor the app
#   viewer/views/    (the registry files) the views and the session
#   viewer/app/      every viewer room
set -euo pipefail
root="${1:?usage: layers.sh SOURCE_DIR}"
cd "$root"

# allowed FILE -> the include prefixes the file may use (space separated).
allowed() {
  local f="$1"
  case "$f" in
    core/*) echo "core/" ;;
    cpu/*) echo "core/ cpu/" ;;
    kernels/*) echo "core/ kernels/" ;;
    engine/*) echo "core/ cpu/ kernels/ engine/" ;;
    cli/*) echo "core/ cpu/ engine/ cli/" ;;
    tests/core/*) echo "core/ tests/test_util.h" ;;
    viewer/draw/*) echo "core/ viewer/draw/" ;;
    viewer/session/*) echo "core/ engine/ cpu/ viewer/draw/ viewer/session/" ;;
    viewer/ui/*) echo "core/ viewer/draw/ viewer/session/ viewer/ui/" ;;
    viewer/views/*/*)
      local own="${f#viewer/views/}"
      own="viewer/views/${own%%/*}/"
      local ui=""
      case "${f##*/}" in panel*.cpp) ui="viewer/ui/" ;; esac
      echo "core/ engine/ cpu/ viewer/draw/ viewer/session/ viewer/views/view.h $own $ui" ;;
    viewer/views/*) echo "core/ engine/ cpu/ viewer/draw/ viewer/session/ viewer/views/" ;;
    viewer/app/*) echo "core/ engine/ cpu/ viewer/" ;;
    *) echo "*" ;;
  esac
}

bad=0
while IFS= read -r f; do
  allow="$(allowed "$f")"
  [ "$allow" = "*" ] && continue
  while IFS= read -r hit; do
    line="${hit%%:*}"
    inc="${hit#*:}"
    inc="${inc#*\"}"
    inc="${inc%%\"*}"
    case "$inc" in */*) ;; *) continue ;; esac   # a system or same-folder header without a path
    ok=0
    for a in $allow; do
      case "$inc" in "$a"*) ok=1 ;; esac
    done
    if [ "$ok" -eq 0 ]; then
      echo "$f:$line: includes \"$inc\" (a $(dirname "$f")/ file may include: $allow)"
      bad=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
done < <(find core cpu kernels engine cli tests/core viewer -type f \
           \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.def' \) | sort)

if [ "$bad" -ne 0 ]; then
  echo "layers: includes that run the wrong way (above); see tests/scripts/layers.sh for the rules"
  exit 1
fi
echo "layers: every include points down or sideways within its room"
