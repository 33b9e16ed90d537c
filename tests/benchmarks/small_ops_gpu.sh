#!/usr/bin/env bash
# One GPU-host pass over the small-op kernels: standalone kernels build (sm_90), the GoogleTest
# binaries, compute-sanitizer (memcheck on the GPU tests, racecheck on the kernels that share
# memory between warps), then the benchmark. Logs go to $OUT (or ./small_ops_out).
#   bash tests/benchmarks/small_ops_gpu.sh [build-dir]
set -u -o pipefail
OUT=${OUT:-$PWD/small_ops_out}
BUILD=${1:-/tmp/flame-kernels}
mkdir -p "$OUT"
TESTS="rms_norm_test cross_entropy_test short_conv_test l2norm_test rotary_test swiglu_test"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
# Build from a copy that keeps only the small-op families, so that work in progress in the other
# kernel families cannot break this pass.
SRC=/tmp/flame-small-ops-src
rm -rf "$SRC" && mkdir -p "$SRC" && cp -r kernels tests "$SRC/"
python3 - "$SRC" <<'PY'
import re, sys
src = sys.argv[1]
mine = ["norm", "cross_entropy", "conv", "l2norm", "rotary", "activations"]
tests = ["rms_norm_test", "cross_entropy_test", "short_conv_test", "l2norm_test", "rotary_test",
         "swiglu_test"]
def keep(path, pattern, names):
    lines = open(path).read().split("\n")
    out = [l for l in lines if not (m := re.match(pattern, l)) or m.group(1) in names]
    open(path, "w").write("\n".join(out))
keep(f"{src}/kernels/CMakeLists.txt", r"add_subdirectory\((\w+)\)", mine)
keep(f"{src}/tests/kernels/CMakeLists.txt", r"flame_kernel_test\((\w+) ", tests)
text = open(f"{src}/tests/benchmarks/kernels.cmake").read()
open(f"{src}/tests/benchmarks/kernels.cmake", "w").write(text.split("\n\n")[0] + "\n")
PY
cmake -S "$SRC/kernels" -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
time cmake --build "$BUILD" -j${JOBS:-16} --target $TESTS small_ops_benchmark > "$OUT/build.log" 2>&1 \
  || { grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; exit 1; }
status=0
for t in $TESTS; do
  "$BUILD/tests/kernels/$t" > "$OUT/$t.log" 2>&1 || status=1
  echo "$t: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "Failure|error:|relative RMS|FAILED  \]" "$OUT/$t.log" | head -20
done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in $TESTS; do
  timeout 90 "$SAN" --tool memcheck --error-exitcode 9 "$BUILD/tests/kernels/$t" --gtest_filter='*Gpu*' \
    > "$OUT/memcheck_$t.log" 2>&1; echo "memcheck $t: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$t.log")"
done
for t in rms_norm_test short_conv_test; do
  timeout 90 "$SAN" --tool racecheck --error-exitcode 9 "$BUILD/tests/kernels/$t" --gtest_filter='*Gpu*' \
    > "$OUT/racecheck_$t.log" 2>&1; echo "racecheck $t: rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck_$t.log")"
done
"$BUILD/small_ops_benchmark" 30 2>&1 | tee "$OUT/benchmark.txt"
exit $status
