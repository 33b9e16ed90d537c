#!/usr/bin/env bash
# The GPU-host check of the gated chunk kernels (chunk_simple_gla, chunk_gla), in one go:
# builds the kernel targets standalone, runs their tests and a compute-sanitizer memcheck pass,
# then prints the side-by-side timing table (ours, fla's Triton kernels, torch SDPA).
# Run from the repository root; logs go to $OUT (default ./out). fla comes from wheels in .whl/
# when present (see tests/benchmarks/kernels_vs_fla.py). fla's Triton compiles take minutes per
# op and shape group on a fresh machine, so they start first, in background workers, and fla's
# timing ends FLA_TIMEOUT seconds after the script's start with what finished.
# kernels_vs_fla_h200.sh is the same run for all four chunk ops, without memcheck.
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-out}
BUILD=${BUILD:-/tmp/flame-kernels}
STATE=${STATE:-/tmp/fla-warm}
mkdir -p "$OUT"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site
fi
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
python3 tests/benchmarks/kernels_vs_fla.py warm-all --state-dir "$STATE"
cmake -S kernels -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/cfg.log" 2>&1 || { tail -20 "$OUT/cfg.log"; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target gated_recurrence_reference_test chunk_gla_test \
  chunk_simple_gla_test chunk_attention_benchmark > "$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head -20; exit 1; }

status=0
for t in gated_recurrence_reference_test chunk_simple_gla_test chunk_gla_test; do
  "$BUILD/tests/kernels/$t" > "$OUT/$t.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$t rc=$rc"
  # One line per case: relative RMS error of every output and gradient.
  grep -E "^[a-z]|rel_rms|Failure" "$OUT/$t.log" | awk '/^[a-z]/{printf "\n  %s:", $1; next}
    /rel_rms/{printf " %s=%s", $1, $3; next} {printf "\n    %s", $0}'
  echo
done
for t in chunk_simple_gla_test chunk_gla_test; do
  compute-sanitizer --tool memcheck "$BUILD/tests/kernels/$t" --gtest_filter='*T100*:*T263_H1*' \
    > "$OUT/memcheck_$t.log" 2>&1
  echo "memcheck $t rc=$? $(tail -1 "$OUT/memcheck_$t.log")"
done

PYTHONUNBUFFERED=1 python3 tests/benchmarks/kernels_vs_fla.py run \
  --binary "$BUILD/chunk_attention_benchmark" --state-dir "$STATE" \
  --deadline $((start + ${FLA_TIMEOUT:-420})) > "$OUT/kernels_vs_fla.log" 2>&1
python3 tests/benchmarks/kernels_vs_fla.py table "$OUT/kernels_vs_fla.log"
exit $status
