#!/usr/bin/env bash
# Side-by-side iteration on the chunk kernels on the GPU host, in one device call: builds several
# copies of kernels/ (variants), runs the GPU tests on each, times them interleaved, and
# optionally profiles each per kernel -- so that a change is measured against its base in the same
# run, on the same machine.
#   VARIANTS="main:. pass:_var/pass" OUT=$OUT bash tests/benchmarks/compare_variants.sh
# Each variant is name:dir[:test,test...], dir holding a kernels/ folder (the repository root, or a
# copy of kernels/ in an untracked folder such as _var/NAME/, made on the CPU machine with
# `cp -r kernels _var/NAME/` and edited there), and optionally its own tests/ (else the root's);
# the tests named after the second colon replace TESTS for that variant. Knobs: TESTS (test
# binaries of tests/kernels, run on every variant that names none; default chunk_gla_test),
# SANITIZE=1 (compute-sanitizer memcheck of each variant's tests), RACECHECK=FILTER (racecheck of
# each variant's tests over that gtest filter; the sanitizers run side by side, before the timing),
# OPS (benchmark ops, comma-separated, default chunk_gla), SHAPE (one benchmark shape: an index
# or B,T,H,D; default all five), ROUNDS (timing rounds, each variant once per round, default 2;
# 0: none), FLAME_BENCH_BUDGET_MS (default 300 here), PROFILE_SHAPE (a shape index: ncu time and
# DRAM bytes per kernel call of OPS there, per variant). A variant folder with a bin/ folder is
# not built here: bin/ holds its test binaries and chunk_attention_benchmark, each xz-compressed
# (NAME.xz), as prebuild_variant.sh builds them on the CPU machine, which saves the device call
# its build.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-out}
VARIANTS=${VARIANTS:-main:.}
TESTS=${TESTS-chunk_gla_test}
OPS=${OPS:-chunk_gla}
SHAPE=${SHAPE:-}
export FLAME_BENCH_BUDGET_MS=${FLAME_BENCH_BUDGET_MS:-300}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s] $*"; }
root=$(pwd)
jobs=$(( $(nproc) / $(echo $VARIANTS | wc -w) )); [ "$jobs" -ge 1 ] || jobs=1

# The fields of a variant spec: name, dir, its tests (space-separated).
variant_name() { echo "${1%%:*}"; }
variant_dir() { local rest=${1#*:}; echo "${rest%%:*}"; }
variant_tests() {
  local rest=${1#*:}
  if [ "$rest" != "${rest#*:}" ]; then echo "${rest#*:}" | tr ',' ' '; else echo "$TESTS"; fi
}

for v in $VARIANTS; do
  (
    name=$(variant_name "$v") dir=$(variant_dir "$v") w=/tmp/variant-$name
    tests=$root/tests
    [ -d "$root/$dir/tests" ] && tests=$root/$dir/tests
    rm -rf "$w" && mkdir -p "$w/b/tests/kernels"
    if [ -d "$root/$dir/bin" ]; then
      # Built on the CPU machine (nvcc for sm_90 there), brought xz-compressed: no build here.
      for f in "$root/$dir"/bin/*.xz; do
        t=$(basename "$f" .xz) to=$w/b/tests/kernels
        [ "$t" = chunk_attention_benchmark ] && to=$w/b
        xz -dc "$f" > "$to/$t" && chmod +x "$to/$t" || { echo "build $name: bad $f"; exit 1; }
      done
      echo "build $name: prebuilt"
      exit 0
    fi
    cp -r "$tests" "$w/" && cp -r "$root/$dir/kernels" "$w/"
    cmake -S "$w/kernels" -B "$w/b" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/build_$name.log" 2>&1 &&
      cmake --build "$w/b" -j"$jobs" --target $(variant_tests "$v") chunk_attention_benchmark \
        >> "$OUT/build_$name.log" 2>&1
    echo "build $name: rc=$?"
  ) &
done
wait
el built

# sanitize TOOL NAME TEST BINARY [FILTER]: one compute-sanitizer run, its verdict on one line.
sanitize() {
  local tool=$1 name=$2 t=$3 bin=$4 filter=${5:-*}
  timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" --gtest_filter="$filter" \
    > "$OUT/${tool}_${name}_$t.log" 2>&1
  echo "$name $t $tool ($filter): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
    "$OUT/${tool}_${name}_$t.log" | tail -1)"
}
for v in $VARIANTS; do
  name=$(variant_name "$v") b=/tmp/variant-$(variant_name "$v")/b
  for t in $(variant_tests "$v"); do
    timeout 150 "$b/tests/kernels/$t" > "$OUT/test_${name}_$t.log" 2>&1
    echo "$name $t: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/test_${name}_$t.log" | tr '\n' ' ')"
    grep -A3 "Failure" "$OUT/test_${name}_$t.log" | head -12
  done
done
el tested
for v in $VARIANTS; do
  name=$(variant_name "$v") b=/tmp/variant-$(variant_name "$v")/b
  for t in $(variant_tests "$v"); do
    [ "${SANITIZE:-0}" = 1 ] && sanitize memcheck "$name" "$t" "$b/tests/kernels/$t" &
    [ -n "${RACECHECK:-}" ] && sanitize racecheck "$name" "$t" "$b/tests/kernels/$t" "$RACECHECK" &
  done
done
wait
el sanitized

for round in $(seq "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    name=$(variant_name "$v")
    timeout 120 "/tmp/variant-$name/b/chunk_attention_benchmark" "$OPS" $SHAPE 2>&1 |
      sed "s/^{/{\"variant\": \"$name\", \"round\": $round, /" >> "$OUT/bench.jsonl"
  done
done
el timed
[ -f "$OUT/bench.jsonl" ] && python3 - "$OUT/bench.jsonl" <<'PY'
import collections, json, sys
rows = collections.defaultdict(list)  # (op, shape) -> [(variant, fwd, f+b)]
for line in open(sys.argv[1]):
    if line.startswith("{") and "fwd_ms" in line:
        r = json.loads(line)
        rows[(r["op"], (r["B"], r["T"], r["H"], r["D"]))].append((r["variant"], r["fwd_ms"], r["fwdbwd_ms"]))
print("forward / forward+backward ms, per variant (every round)")
for (op, shape), runs in rows.items():
    by = collections.defaultdict(list)
    for v, f, fb in runs:
        by[v].append(f"{f:.3f}/{fb:.3f}")
    print(f"  {op} {','.join(map(str, shape))}: " + "  ".join(f"{v} {' '.join(x)}" for v, x in by.items()))
PY

if [ -n "${PROFILE_SHAPE:-}" ]; then
  for v in $VARIANTS; do
    name=$(variant_name "$v")
    FLAME_BENCH_REPS=1 FLAME_BENCH_WARMUP=0 FLAME_BENCH_BUDGET_MS=0 timeout 200 ncu --clock-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      "/tmp/variant-$name/b/chunk_attention_benchmark" "$OPS" "$PROFILE_SHAPE" \
      > "$OUT/ncu_$name.log" 2>&1
    echo "== $name, per kernel call at shape $PROFILE_SHAPE (mean over the calls): us, DRAM MB" \
      "read + written, TB/s"
    python3 - "$OUT/ncu_$name.log" <<'PY'
import collections, re, sys
# ncu's units: time in ns/us/ms (usecond etc.), bytes in byte/Kbyte/Mbyte/Gbyte (decimal).
TIME = {'n': 1e-3, 'u': 1.0, 'm': 1e3, 's': 1e6}
BYTES = {'b': 1e-6, 'K': 1e-3, 'M': 1.0, 'G': 1e3}
calls, name = collections.OrderedDict(), None
for line in open(sys.argv[1]):
    m = re.match(r'\s+(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)', line)
    if m:
        name = m.group(1).split('(')[0][-50:]
        calls.setdefault(name, []).append({})
        continue
    m = re.search(r'(gpu__time_duration|dram__bytes_(?:read|write))\.sum\s+(\S+)\s+([\d.,]+)', line)
    if m and name:
        metric, unit, v = m.group(1), m.group(2), float(m.group(3).replace(',', ''))
        units = TIME if metric.startswith('gpu') else BYTES
        calls[name][-1][metric] = v * units.get(unit[0].replace('\u03bc', 'u'), 1.0)
for k, v in calls.items():
    mean = lambda key: sum(c.get(key, 0.0) for c in v) / len(v)
    us, rd, wr = mean('gpu__time_duration'), mean('dram__bytes_read'), mean('dram__bytes_write')
    rate = (rd + wr) / us if us else 0.0
    print(f"  {us:9.1f} x{len(v):3d} {rd:8.1f} + {wr:7.1f} MB {rate:5.2f}  {k}")
PY
  done
  el profiled
fi
