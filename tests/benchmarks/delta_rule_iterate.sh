#!/usr/bin/env bash
# One GPU-host iteration on the chunk kernels (the delta rule by default), from the repository
# root, in well under a minute of device time: builds kernels/ standalone, runs the GPU tests
# (errors per case), times chunk_attention_benchmark (ours only; kernels_vs_fla_h200.sh is the run
# beside fla), and optionally:
#   PROFILE=1   ncu time per kernel call (mean over the calls) of PROFILE_OP (default
#               chunk_gated_delta_rule; any benchmark op) at shape PROFILE_SHAPE (default 0)
#   SANITIZE=1  compute-sanitizer memcheck (all gated cases) and racecheck (two delta cases)
#   DETAIL=1    ncu SpeedOfLight / Occupancy / WarpStateStats / memory sections of DETAIL_KERNELS
#               (a kernel-name regex) in a run of DETAIL_OP at DETAIL_SHAPE (defaults: the delta-rule
#               tile kernels, chunk_gated_delta_rule, shape 0); DETAIL_COUNT launches are taken in
#               launch order, so name backward kernels alone to reach them
#   STALLS=1    ncu stall reasons and instruction counts of STALL_KERNELS in a run of STALL_OP
#               (default chunk_gated_delta_rule, shape 0), with the static SASS instruction mix of
#               STALL_KERNELS_SASS in SASS_OBJ (default the delta-rule object; cuobjdump)
# Knobs: OPS (benchmark ops, default both delta rules), SHAPE (benchmark shape index, default
# all five), BENCH=0 (no timing), TESTS (test binaries of tests/kernels, default both delta-rule
# tests; empty for none), TEST_LINES (error lines shown). Logs go to $OUT. For chunk_gla, e.g.:
#   TESTS=chunk_gla_test OPS=chunk_gla PROFILE=1 PROFILE_OP=chunk_gla DETAIL=1 DETAIL_OP=chunk_gla
#   DETAIL_KERNELS='Channel' SASS_OBJ=gla/chunk_gla
# (the SANITIZE step stays on the delta-rule tests).
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-out}; B=${BUILD:-/tmp/flame-delta}; t0=$(date +%s)
TESTS=${TESTS-chunk_delta_rule_test chunk_gated_delta_rule_test}
mkdir -p "$OUT"
el() { echo "[$(($(date +%s) - t0)) s] $*"; }
cmake -S kernels -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=RelWithDebInfo > $OUT/build.log 2>&1 &&
  cmake --build $B -j16 --target $TESTS chunk_attention_benchmark >> $OUT/build.log 2>&1 || { grep -E "error" $OUT/build.log | head -30; exit 1; }
el built
for t in $TESTS; do
  timeout 120 $B/tests/kernels/$t > $OUT/$t.log 2>&1
  echo "$t rc=$?"; grep -E "^[a-z]|rel_rms|Failure|PASSED|FAILED|Expected|Which is|actual" $OUT/$t.log | head -${TEST_LINES:-40}
done
el tested
if [ "${BENCH:-1}" = 1 ]; then
  timeout 200 $B/chunk_attention_benchmark ${OPS:-chunk_delta_rule,chunk_gated_delta_rule} ${SHAPE:-} 2>&1 | tail -40
  el timed
fi
if [ "${PROFILE:-0}" = 1 ]; then
  FLAME_BENCH_REPS=1 FLAME_BENCH_WARMUP=0 FLAME_BENCH_BUDGET_MS=0 timeout 200 ncu --clock-control none \
    --metrics gpu__time_duration.sum $B/chunk_attention_benchmark ${PROFILE_OP:-chunk_gated_delta_rule} \
    ${PROFILE_SHAPE:-0} > $OUT/ncu.log 2>&1
  python3 - $OUT/ncu.log <<'PY'
import re, sys, collections
tot = collections.OrderedDict(); name = None
for line in open(sys.argv[1]):
    m = re.match(r'\s+(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)', line)
    if m: name = m.group(1).split('(')[0][-60:]; continue
    m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', line)
    if m and name:
        v = float(m.group(2).replace(',', '')); unit = m.group(1)
        v = v / 1000 if unit[0] == 'n' else v if unit[0] in 'uμ' else v * 1000
        tot.setdefault(name, []).append(v)
for k, v in tot.items(): print(f"{sum(v) / len(v):10.1f} us per call  x{len(v):3d}  {k}")
PY
  el profiled
fi
if [ "${SANITIZE:-0}" = 1 ]; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/kernels/chunk_gated_delta_rule_test > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/kernels/chunk_delta_rule_test --gtest_filter='*T100*:*T263*varlen5_states*' > $OUT/racecheck.log 2>&1; echo "racecheck rc=$?"; grep -E "ERROR SUMMARY|RACE|Race|PASSED|FAILED" $OUT/racecheck.log | head
  el sanitized
fi
if [ "${DETAIL:-0}" = 1 ]; then
  FLAME_BENCH_REPS=1 FLAME_BENCH_WARMUP=0 FLAME_BENCH_BUDGET_MS=0 timeout 240 ncu --clock-control none \
    -k regex:"${DETAIL_KERNELS:-ChunkPrepare|RowTerms|StateBackward|OutputKernel|WYBackward}" -c ${DETAIL_COUNT:-6} \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    $B/chunk_attention_benchmark ${DETAIL_OP:-chunk_gated_delta_rule} ${DETAIL_SHAPE:-0} > $OUT/ncu_detail.log 2>&1
  grep -E "tiles::|gated_chunk::|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Block Limit Shared|stalled|Stall|L1/TEX Hit|Mem Busy|Max Bandwidth" $OUT/ncu_detail.log | cut -c1-220 | head -${DETAIL_LINES:-120}
  el detailed
fi
if [ "${STALLS:-0}" = 1 ]; then
  FLAME_BENCH_REPS=1 FLAME_BENCH_WARMUP=0 FLAME_BENCH_BUDGET_MS=0 timeout 300 ncu --clock-control none \
    -k regex:"${STALL_KERNELS:-StateForward|StateBackward}" -c ${STALL_COUNT:-2} \
    --section WarpStateStats --section InstructionStats --section SourceCounters \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__cycles_active.avg' \
    $B/chunk_attention_benchmark ${STALL_OP:-chunk_gated_delta_rule} 0 > $OUT/stalls.log 2>&1
  grep -E "tiles::|gated_chunk::|inst_executed.sum|cycles_active|Executed Instructions  |issue_stalled" $OUT/stalls.log | awk '$NF+0 > 0.05 || /tiles::|gated_chunk::|inst/' | cut -c1-160 | head -90
  cuobjdump -sass $B/CMakeFiles/flame_kernels.dir/${SASS_OBJ:-delta_rule/chunk_delta_rule}.cu.o > $OUT/all.sass 2>&1
  for k in ${STALL_KERNELS_SASS:-StateForward StateBackward}; do
    echo "== $k"; awk "/Function : .*$k/{f=1;next} /Function :/{f=0} f" $OUT/all.sass | grep -oE "^\s+/\*[0-9a-f]+\*/\s+(@!?U?P[0-9T] )?[A-Z][A-Z0-9_]+" | awk '{print $NF}' | sort | uniq -c | sort -rn | head -25 | tr '\n' ' '; echo
  done
  el stalls
fi
