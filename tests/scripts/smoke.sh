#!/usr/bin/env bash
# Smoke tests of the lab's scripts on a machine without a GPU (ctest label cpu), so that a script
# bug shows up in CI rather than during the few minutes of a lent GPU (session 1 lost its staged
# benchmark to a variable missing from gpu-check's environment).
#
#   tests/scripts/smoke.sh gpu-check|bench-sweep|compare-torch BUILD_DIR
#
# gpu-check   --sweep against gpu-stage's copy of BUILD_DIR: every step runs and is listed as SKIP
#             (no device: none may claim PASS), none fails, exit 3; no shell error in the logs; the
#             configuration sweep covers every configuration; the table comes last. gpu-stage refuses
#             a STAGE_DIR whose removal would lose the build tree (on a stand-in tree) and takes a
#             relative one; gpu-check refuses an unknown option and words after its arguments.
# bench-sweep a tiny CPU sweep: the CSV has every case, and the two charts are PNG files.
# compare-torch without PyTorch: says it is skipped and exits 0 (with PyTorch it needs a GPU);
#             --cpu (and --cpu --mods) says so too and exits 3 (nothing measured), or, where PyTorch
#             imports, times one tiny case against the CPU fused kernel and prints the table;
#             --mods without --cpu (the GPU's modification table) is skipped like the GPU tables;
#             --mods --decode is a usage error; so are an option the mode ignores, a bad --max-load or
#             --load-wait, and an --output that is --binary, a folder or in a missing folder.
set -uo pipefail

what=$1
build=$(cd "$2" && pwd -P)
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION COMMAND...
  local d=$1
  shift
  if "$@"; then echo "ok: $d"; else echo "FAILED: $d"; fails=$((fails + 1)); fi
}

case $what in
  gpu-check)
    # On scripts/gpu-stage's copy, as on the GPU machine (and so that the nested ctest writes its
    # logs there, not into the build tree whose ctest runs this test).
    check "gpu-stage copies the tree" "$repo/scripts/gpu-stage" "$build" "$tmp/stage"
    # A stand-in compute-sanitizer (runs the program with its arguments) where the real one is
    # missing, so that the sanitizer steps' shell code runs here too.
    mkdir -p "$tmp/bin"
    if ! command -v compute-sanitizer >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/compute-sanitizer ]; then
      printf '#!/bin/sh\nshift 4\nexec "$@"\n' >"$tmp/bin/compute-sanitizer"
      chmod +x "$tmp/bin/compute-sanitizer"
    fi
    PATH="$tmp/bin:$PATH" "$repo/scripts/gpu-check" --sweep "$tmp/out" "$tmp/stage" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    cat "$tmp/stdout"
    check "exit status 3 (no device: nothing measured), got $rc" test "$rc" = 3
    for s in verify-demo ctest-decode ctest-mods gtest-gpu cfg-fused-fp32-0 cfg-fused-fp32-1 cfg-fused-fp32-2 cfg-fused-bf16-0 \
      cfg-fused-bf16-1 cfg-fused-bf16-2 cfg-fused-bf16-3 cfg-fused-bf16-4 cfg-staged-0 cfg-decode-1 sanitize-mods sanitize-new sanitize-old verify-4096-causal bench-targets \
      bench-decode view-redraw view-stream torch config-sweep torch-mods ctest-backward sanitize-backward bench-backward torch-backward; do
      check "step $s listed" grep -q "^$s " "$tmp/out/summary.txt"
    done
    # Without a device no step may claim PASS; each runs and reports SKIP, and none fails.
    check "no step passes without a device" bash -c "! grep -Eq ' PASS ' '$tmp/out/summary.txt'"
    check "no step fails" bash -c "! grep -Eq ' (FAIL|TIMEOUT|NOT RUN)' '$tmp/out/summary.txt'"
    for s in verify-demo ctest-decode ctest-backward ctest-mods gtest-gpu bench-targets bench-decode bench-backward cfg-fused-fp32-1 cfg-fused-bf16-3 cfg-staged-0 cfg-decode-1 sanitize-mods \
      sanitize-new sanitize-old config-sweep; do
      check "step $s ran and reports SKIP" grep -Eq "^$s +SKIP \(no CUDA device" "$tmp/out/summary.txt"
    done
    check "no shell errors" bash -c "! grep -Eh 'unbound variable|command not found|syntax error' \
      '$tmp/stderr' '$tmp/out/steps.log' '$tmp/out/ctest.log'"
    n_markers=$(grep -c '"kind":"time"' "$tmp/out/configs.json")
    check "configs.json times 5 bf16 + 3 fp32 fused + 2 staged configurations (got $n_markers)" \
      test "$n_markers" = 10
    check "the configuration table comes last" bash -c "tail -n 3 '$tmp/stdout' | grep -q '^variant '"
    # --only: the named steps run (and report SKIP here), every other one is skipped as such.
    PATH="$tmp/bin:$PATH" "$repo/scripts/gpu-check" --only verify-demo,bench-decode "$tmp/only" "$tmp/stage" \
      >"$tmp/only.stdout" 2>&1
    rc=$?
    check "--only: exit status 3 without a device, got $rc" test "$rc" = 3
    for s in verify-demo bench-decode; do
      check "--only: step $s ran and reports SKIP" grep -Eq "^$s +SKIP \(no CUDA device" "$tmp/only/summary.txt"
    done
    check "--only: the other steps are skipped" grep -Eq "^gtest-gpu +SKIP \(--only\)" "$tmp/only/summary.txt"
    PATH="$tmp/bin:$PATH" "$repo/scripts/gpu-check" --only verify-demo,no-such-step "$tmp/typo" "$tmp/stage" \
      >"$tmp/typo.stdout" 2>&1
    rc=$?
    check "--only with a name that is no step: exit status 1, got $rc" test "$rc" = 1
    check "--only names the unknown step" grep -q "no step is called no-such-step" "$tmp/typo.stdout"
    # Refusals, each one line on stderr and exit 2 (nothing run, OUTDIR not made).
    one_line_2() {  # one_line_2 COMMAND...: exit 2 with exactly one line of output
      local out rc
      out=$("$@" 2>&1)
      rc=$?
      [ "$rc" = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ]
    }
    check "gpu-check --bogus OUT: unknown option" one_line_2 "$repo/scripts/gpu-check" --bogus "$tmp/bogus"
    check "gpu-check OUT STAGE --sweep: words after the arguments" \
      one_line_2 "$repo/scripts/gpu-check" "$tmp/late" "$tmp/stage" --sweep
    check "gpu-check made no OUTDIR for them" bash -c "[ ! -e '$tmp/bogus' ] && [ ! -e '$tmp/late' ]"
    # gpu-stage on a stand-in build tree: a STAGE_DIR that is, holds or lies in it is refused, and
    # the tree survives; a relative STAGE_DIR is copied into.
    mkdir -p "$tmp/outer/bg/cli"
    touch "$tmp/outer/bg/CMakeCache.txt"
    printf '#!/bin/sh\n' >"$tmp/outer/bg/cli/attnlab"
    chmod +x "$tmp/outer/bg/cli/attnlab"
    check "gpu-stage bg bg: refused" one_line_2 "$repo/scripts/gpu-stage" "$tmp/outer/bg" "$tmp/outer/bg"
    check "gpu-stage bg outer: refused" one_line_2 "$repo/scripts/gpu-stage" "$tmp/outer/bg" "$tmp/outer"
    check "gpu-stage bg bg/x: refused" one_line_2 "$repo/scripts/gpu-stage" "$tmp/outer/bg" "$tmp/outer/bg/x"
    check "gpu-stage left the build tree" test -x "$tmp/outer/bg/cli/attnlab"
    check "gpu-stage with a relative STAGE_DIR" bash -c \
      "cd '$tmp/outer' && '$repo/scripts/gpu-stage' bg rel-stage >/dev/null 2>&1 && test -x rel-stage/cli/attnlab"
    ;;
  bench-sweep)
    "$repo/scripts/bench-sweep" --binary "$build/cli/attnlab" --out "$tmp" --repeat 1 \
      --cpu-n 32,64 >"$tmp/log" 2>&1
    rc=$?
    cat "$tmp/log"
    check "exit status 0" test "$rc" = 0
    check "CSV: header + 2 N x 2 variants" test "$(wc -l <"$tmp/bench-sweep.csv")" = 5
    check "CSV cases ran" test "$(grep -c ',ok,' "$tmp/bench-sweep.csv")" = 4
    if command -v gnuplot >/dev/null; then
      for png in bench-time.png bench-tflops.png; do
        check "$png is a PNG" bash -c "head -c 8 '$tmp/$png' | od -An -tx1 | grep -q '89 50 4e 47'"
      done
    else
      echo "note: gnuplot missing, charts not checked"
    fi
    check "an option without its value: exit 2, one line" bash -c \
      "out=\$('$repo/scripts/bench-sweep' --repeat 2>&1); test \$? = 2 && test \$(printf '%s\n' \"\$out\" | wc -l) = 1"
    # --help prints the header and builds or runs nothing (it used to run the whole suite).
    for s in test run gpu-stage bench-sweep; do
      check "$s --help is its header" bash -c "'$repo/scripts/$s' --help | head -n 1 | grep -q '$s'"
    done
    ;;
  compare-torch)
    if python3 -c 'import torch' >/dev/null 2>&1; then
      echo "PyTorch is importable here: compare-torch needs a GPU run; syntax only"
      # ast.parse, not py_compile: nothing written into the source tree (scripts/__pycache__).
      check "compiles" python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' \
        "$repo/scripts/compare-torch"
    else
      out=$(ATTNLAB_BINARY="$build/cli/attnlab" "$repo/scripts/compare-torch" 2>&1)
      rc=$?
      echo "$out"
      check "exit status 0" test "$rc" = 0
      check "says it is skipped" grep -q "skipped: PyTorch not importable" <<<"$out"
    fi
    if python3 -c 'import torch' >/dev/null 2>&1; then
      # One small --cpu table (WHAT: the flags after --cpu, the case's mask, the JSON's name).
      cpu_table() {
        local what="$1" mask="$2" json="$3"
        shift 3
        out=$("$repo/scripts/compare-torch" --cpu "$@" --binary "$build/cli/attnlab" --n 64 --d 16 \
          --heads 1 --mask "$mask" --no-single-head --rounds 1 --repeat 1 --warmup 0 \
          --output "$tmp/$json" 2>&1)
        rc=$?
        echo "$out"
        check "$what: exit status 0, got $rc" test "$rc" = 0
        check "$what: the table has the case" grep -q "^heads=1 N=64 d=16 $mask " <<<"$out"
        check "$what: JSON written" test -s "$tmp/$json"
      }
      cpu_table --cpu none torch-cpu.json
      check "--cpu: MKL's SGEMM rate beside the table" grep -Eq "^MKL SGEMM \(torch.mm, 2048\^2 fp32, [0-9]+ threads\), once a round: best [0-9.]+ GFLOP/s" <<<"$out"
      check "--cpu: the probes beside the table" grep -Eq "^probes over the run: FMA peak [0-9]+-[0-9]+ GFLOP/s, tile probe [0-9]+-[0-9]+" <<<"$out"
      cpu_table "--cpu --backward" causal torch-cpu-backward.json --backward
    else
      out=$("$repo/scripts/compare-torch" --cpu --binary "$build/cli/attnlab" 2>&1)
      rc=$?
      echo "$out"
      check "--cpu without PyTorch: exit status 3 (nothing measured), got $rc" test "$rc" = 3
      check "--cpu says PyTorch is missing" grep -q "skipped: PyTorch not importable" <<<"$out"
      out=$("$repo/scripts/compare-torch" --cpu --mods --binary "$build/cli/attnlab" 2>&1)
      rc=$?
      echo "$out"
      check "--cpu --mods without PyTorch: exit status 3 (nothing measured), got $rc" test "$rc" = 3
      check "--cpu --mods says PyTorch is missing" grep -q "skipped: PyTorch not importable" <<<"$out"
      out=$("$repo/scripts/compare-torch" --cpu --backward --binary "$build/cli/attnlab" 2>&1)
      rc=$?
      echo "$out"
      check "--cpu --backward without PyTorch: exit status 3 (nothing measured), got $rc" test "$rc" = 3
    fi
    # --mods without --cpu is the GPU's modification table: skipped like the other GPU tables
    # where PyTorch or a CUDA device is missing.
    out=$("$repo/scripts/compare-torch" --mods --binary "$build/cli/attnlab" 2>&1)
    rc=$?
    check "--mods without --cpu (GPU table): exit 0 where it cannot run, got $rc" test "$rc" = 0
    check "--mods without --cpu says why it is skipped" grep -Eq -- "^skipped: PyTorch (not importable|sees no CUDA device)" <<<"$out"
    out=$("$repo/scripts/compare-torch" --mods --decode 2>&1)
    rc=$?
    check "--mods --decode: usage error, exit 2, got $rc" test "$rc" = 2
    check "--mods --decode says so" grep -q -- "--mods does not go with --decode" <<<"$out"
    out=$("$repo/scripts/compare-torch" --backward 2>&1)
    rc=$?
    check "--backward without --cpu: usage error, exit 2, got $rc" test "$rc" = 2
    check "--backward without --cpu says so" grep -q -- "--backward goes with --cpu" <<<"$out"
    # Usage errors, refused before anything runs: exit 2 and one line. A stand-in --binary, so
    # that a regression overwrites nothing of value.
    printf '#!/bin/sh\nexit 1\n' >"$tmp/fake-attnlab"
    chmod +x "$tmp/fake-attnlab"
    usage_error() {  # usage_error WHAT GREP FLAGS...
      local what="$1" says="$2"
      shift 2
      out=$("$repo/scripts/compare-torch" "$@" 2>&1)
      rc=$?
      check "$what: usage error, exit 2, got $rc" test "$rc" = 2
      check "$what: one line that says so" bash -c 'test "$(printf "%s\n" "$1" | wc -l)" = 1 && grep -q -- "$2" <<<"$1"' \
        _ "$out" "$says"
    }
    usage_error "--output equal to --binary" "would be overwritten" --cpu --binary "$tmp/fake-attnlab" --output "$tmp/fake-attnlab"
    check "--output equal to --binary: the binary is kept" grep -q "exit 1" "$tmp/fake-attnlab"
    usage_error "--output in a missing folder" "no folder" --cpu --binary "$tmp/fake-attnlab" --output "$tmp/no/such.json"
    usage_error "--output a folder" "is a folder" --cpu --binary "$tmp/fake-attnlab" --output "$tmp"
    usage_error "--cpu --decode --n" "--n is ignored by --cpu --decode" --cpu --decode --n 64
    usage_error "--n without --cpu" "--n is ignored without --cpu" --n 64
    usage_error "--window without --mods" "--window is ignored by --cpu" --cpu --window 8
    usage_error "--load-wait -1" "--load-wait must be" --cpu --mods --load-wait -1
    usage_error "--max-load nan" "--max-load must be > 0" --cpu --mods --max-load nan
    ;;
  *)
    echo "usage: $0 gpu-check|bench-sweep|compare-torch BUILD_DIR" >&2
    exit 2
    ;;
esac
[ "$fails" = 0 ]
