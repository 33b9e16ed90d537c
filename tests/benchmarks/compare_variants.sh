#!/usr/bin/env bash
# Side-by-side iteration on the chunk kernels on the GPU host, in one device call: builds several
# copies of kernels/ (variants), runs the GPU tests on each, times them interleaved, and
# optionally profiles each per kernel -- so that a change is measured against its base in the same
# run, on the same machine.
#   VARIANTS="main:. pass:_var/pass" OUT=$OUT bash tests/benchmarks/compare_variants.sh
# Each variant is name:dir, dir holding a kernels/ folder (the repository root, or a copy of
# kernels/ in an untracked folder such as _var/NAME/, made on the CPU machine with `cp -r kernels
# _var/NAME/` and edited there), and optionally its own tests/ (else the root's). Knobs: TESTS (test binaries of tests/kernels, run on every
# variant; default chunk_gla_test), SANITIZE=1 (compute-sanitizer memcheck of TESTS on every
# variant), OPS (benchmark ops, default chunk_gla), SHAPE (one benchmark shape index, default all
# five), ROUNDS (timing rounds, each variant once per round, default 2), FLAME_BENCH_BUDGET_MS
# (default 300 here), PROFILE_SHAPE (a shape index: ncu time per kernel call of OPS there, per
# variant). Tests and kernels build from tests/ of the repository root.
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

for v in $VARIANTS; do
  (
    name=${v%%:*} dir=${v#*:} w=/tmp/variant-$name
    tests=$root/tests
    [ -d "$root/$dir/tests" ] && tests=$root/$dir/tests
    rm -rf "$w" && mkdir -p "$w" && cp -r "$tests" "$w/" && cp -r "$root/$dir/kernels" "$w/"
    cmake -S "$w/kernels" -B "$w/b" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/build_$name.log" 2>&1 &&
      cmake --build "$w/b" -j"$jobs" --target $TESTS chunk_attention_benchmark \
        >> "$OUT/build_$name.log" 2>&1
    echo "build $name: rc=$?"
  ) &
done
wait
el built

for v in $VARIANTS; do
  name=${v%%:*} b=/tmp/variant-$name/b
  for t in $TESTS; do
    timeout 150 "$b/tests/kernels/$t" > "$OUT/test_${name}_$t.log" 2>&1
    echo "$name $t: rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/test_${name}_$t.log" | tr '\n' ' ')"
    grep -A3 "Failure" "$OUT/test_${name}_$t.log" | head -12
    if [ "${SANITIZE:-0}" = 1 ]; then
      timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/tests/kernels/$t" \
        > "$OUT/memcheck_${name}_$t.log" 2>&1
      echo "$name $t memcheck: rc=$? $(grep 'ERROR SUMMARY' "$OUT/memcheck_${name}_$t.log")"
    fi
  done
done
el tested

for round in $(seq "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    name=${v%%:*}
    timeout 120 "/tmp/variant-$name/b/chunk_attention_benchmark" "$OPS" $SHAPE 2>&1 |
      sed "s/^{/{\"variant\": \"$name\", \"round\": $round, /" >> "$OUT/bench.jsonl"
  done
done
el timed
python3 - "$OUT/bench.jsonl" <<'PY'
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
    name=${v%%:*}
    FLAME_BENCH_REPS=1 FLAME_BENCH_WARMUP=0 FLAME_BENCH_BUDGET_MS=0 timeout 200 ncu --clock-control none \
      --metrics gpu__time_duration.sum "/tmp/variant-$name/b/chunk_attention_benchmark" "$OPS" \
      "$PROFILE_SHAPE" > "$OUT/ncu_$name.log" 2>&1
    echo "== $name, per kernel call at shape $PROFILE_SHAPE (us, mean over the calls)"
    python3 - "$OUT/ncu_$name.log" <<'PY'
import collections, re, sys
calls, name = collections.OrderedDict(), None
for line in open(sys.argv[1]):
    m = re.match(r'\s+(\S.*?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)', line)
    if m:
        name = m.group(1).split('(')[0][-50:]
        continue
    m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', line)
    if m and name:
        v, unit = float(m.group(2).replace(',', '')), m.group(1)
        calls.setdefault(name, []).append(v / 1000 if unit[0] == 'n' else v if unit[0] in 'uμ' else v * 1000)
for k, v in calls.items():
    print(f"  {sum(v) / len(v):9.1f} x{len(v):3d}  {k}")
PY
  done
  el profiled
fi
