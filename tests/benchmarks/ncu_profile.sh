#!/usr/bin/env bash
# Where a chunk kernel's time goes, on the GPU host: ncu's full sections for the first calls of
# the kernels named KERNEL (a regex) in one run of the chunk benchmark, summarised by
# ncu_summary.py -- bandwidth and issue rates, occupancy, the warp stall reasons, and from the
# SASS the opcode mix, how many instructions run how often and the most-stalled instructions.
# (sass_mix.sh counts a kernel's instructions without a GPU, and delta_rule_iterate.sh's DETAIL and
# STALLS print ncu's sections for the delta kernels; this says which instructions cost.)
#   KERNEL=HeadChunkGradQK OPS=chunk_simple_gla SHAPE=3 OUT=$OUT bash tests/benchmarks/ncu_profile.sh
# Knobs: KERNEL (default HeadStatePass), OPS and SHAPE (the benchmark's op and shape index,
# default chunk_simple_gla 3 = (1,8192,96,128)), COUNT (calls profiled, default 1), BENCH (a
# chunk_attention_benchmark binary, or an .xz of one as prebuild_variant.sh makes; default: build
# kernels/ standalone here), TOP (instructions listed, default 25). ncu locks the clocks at base
# (1.35 GHz on the H200), so its durations run ~1.25x the benchmark's; the report goes to $OUT.
set -uo pipefail
OUT=${OUT:-ncu-out}
KERNEL=${KERNEL:-HeadStatePass}
OPS=${OPS:-chunk_simple_gla}
SHAPE=${SHAPE:-3}
export NCCL_NVLS_ENABLE=0
mkdir -p "$OUT"
here=$(dirname "$0")
bench=${BENCH:-}
if [[ "$bench" == *.xz ]]; then
  xz -dc "$bench" > /tmp/ncu-bench && chmod +x /tmp/ncu-bench && bench=/tmp/ncu-bench
elif [ -z "$bench" ]; then
  cmake -S kernels -B /tmp/ncu-build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/build.log" 2>&1 &&
    cmake --build /tmp/ncu-build -j"$(nproc)" --target chunk_attention_benchmark \
      >> "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  bench=/tmp/ncu-build/chunk_attention_benchmark
fi
# One forward and one forward + backward, no warm-up: the profiled calls are the first ones.
FLAME_BENCH_REPS=1 FLAME_BENCH_WARMUP=0 FLAME_BENCH_BUDGET_MS=0 timeout 300 \
  ncu --set full --import-source no -k "regex:$KERNEL" -c "${COUNT:-1}" -o "$OUT/profile" \
  "$bench" "$OPS" "$SHAPE" > "$OUT/ncu.log" 2>&1 || { tail -20 "$OUT/ncu.log"; exit 1; }
ncu -i "$OUT/profile.ncu-rep" --page details --print-details all > "$OUT/details.txt"
ncu -i "$OUT/profile.ncu-rep" --page source --print-source sass --csv > "$OUT/source.csv"
python3 "$here/ncu_summary.py" "$OUT/details.txt" "$OUT/source.csv" "${TOP:-25}" |
  tee "$OUT/summary.txt"
