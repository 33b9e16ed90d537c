#!/usr/bin/env bash
# The GPU-host check of the gated chunk kernels (chunk_simple_gla, chunk_gla), in one go:
# builds the kernel targets standalone, runs their tests and a compute-sanitizer memcheck pass,
# then prints the side-by-side timing table (ours, fla's Triton kernels, torch SDPA).
# Run from the repository root; logs go to $OUT (default ./out). fla comes from wheels in .whl/
# when present (see tests/benchmarks/kernels_vs_fla.py). fla autotunes its Triton kernels on the
# first call per shape, which on a fresh machine took over 5 minutes for chunk_gla at the first
# shape alone: give FLA_TIMEOUT (seconds) room, or a TRITON_CACHE_DIR kept from an earlier run.
set -uo pipefail
OUT=${OUT:-out}
BUILD=${BUILD:-/tmp/flame-kernels}
mkdir -p "$OUT"
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

if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site
fi
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
PYTHONUNBUFFERED=1 timeout "${FLA_TIMEOUT:-420}" python3 tests/benchmarks/kernels_vs_fla.py \
  --binary "$BUILD/chunk_attention_benchmark" 2>&1 | tee "$OUT/kernels_vs_fla.log"
exit $status
