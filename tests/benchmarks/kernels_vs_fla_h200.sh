#!/usr/bin/env bash
# The GPU-host run of the chunk attention kernels against fla, in one go and inside a time budget:
#   1. starts fla's compile warm-up workers (kernels_vs_fla.py warm-all), which run beside 2-3;
#   2. builds kernels/ standalone and the chunk tests and benchmark;
#   3. runs the GLA and delta-rule GPU tests (outputs and gradients vs the fp32 recurrence), and
#      compute-sanitizer memcheck and racecheck on the four chunk ops (SANITIZE=0 skips);
#   4. times ours, SDPA and fla side by side (kernels_vs_fla.py run) and prints the table.
# Run from a folder holding kernels/ and tests/ (the repository root, or a copy of those); logs
# go to $OUT. SRC_DIRS lists such folders to try in turn: the first that builds is measured.
# fla comes from the wheels in .whl/. BUDGET (seconds, whole script) bounds fla's part: what fla
# has not finished is printed as not measured. TRITON_CACHE_DIR holds every compile of the run.
# FLA_OPS (e.g. chunk_gla) narrows the run to those ops (ours and fla's), and gives their compiles
# more workers each; SDPA is timed as always. The workers share the host's cores by each op's
# compile work: on nvidia-h200 (16 cores) FLA_OPS=chunk_gla finished fla's warm-up in 180-230 s,
# FLA_OPS=chunk_delta_rule,chunk_gated_delta_rule the whole run (tests, sanitizers, timing) in
# 169 s, while all four ops leave chunk_gla too few workers to finish; nvidia-h200-x2 (32 cores) gives
# chunk_gla five per group, and the run ended in 232-271 s there, but with 31 workers on one GPU
# some warm-ups ran out of its memory; the workers are now dealt round the GPUs, 16 at most on
# each (kernels_vs_fla.py), and the first such run measured fla at every op and shape (301 s).
set -uo pipefail
start=$(date +%s)
OUT=${OUT:-out}
BUDGET=${BUDGET:-540}
SRC_DIRS=${SRC_DIRS:-.}
BUILD=${BUILD:-/tmp/flame-kernels}
STATE=${STATE:-/tmp/fla-warm}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache} NCCL_NVLS_ENABLE=0
mkdir -p "$OUT" "$STATE" "$TRITON_CACHE_DIR"
first_src=${SRC_DIRS%% *}
bench_py=$first_src/tests/benchmarks/kernels_vs_fla.py
elapsed() { echo "[$(($(date +%s) - start)) s]"; }

if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 "$bench_py" warm-all --state-dir "$STATE"
echo "$(elapsed) fla warm-up workers started"

built=""
for src in $SRC_DIRS; do
  rm -rf "$BUILD"
  cmake -S "$src/kernels" -B "$BUILD" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j"$(nproc)" --target chunk_simple_gla_test chunk_gla_test \
      chunk_delta_rule_test chunk_gated_delta_rule_test chunk_attention_benchmark \
      >> "$OUT/build.log" 2>&1 && { built=$src; break; }
  echo "$(elapsed) build of $src failed:"
  grep -E "error" "$OUT/build.log" | head -20
done
[ -z "$built" ] && exit 1
echo "$(elapsed) built $built"

# The four test binaries side by side (they check values, not speed).
status=0
tests="chunk_simple_gla_test chunk_gla_test chunk_delta_rule_test chunk_gated_delta_rule_test"
for t in $tests; do
  timeout 150 "$BUILD/tests/kernels/$t" > "$STATE/$t.log" 2>&1 &
done
wait  # only the tests: the warm-up workers are not this shell's children
for t in $tests; do
  cat "$STATE/$t.log" >> "$OUT/tests.log"
  echo "$t: $(grep -E '^\[  (PASSED|FAILED)  \]' "$STATE/$t.log" | tr '\n' ' ')"
  grep -qE '^\[  PASSED  \]' "$STATE/$t.log" && ! grep -q FAILED "$STATE/$t.log" || status=1
  # One line per case: relative RMS error of every output and gradient.
  grep -E "^[a-z]|rel_rms|Failure" "$STATE/$t.log" | awk '/^[a-z]/{printf "\n  %s:", $1; next}
    /rel_rms/{printf " %s=%s", $1, $3; next} {printf "\n    %s", $0}'
  echo
done
echo "$(elapsed) tests done (status $status)"

# compute-sanitizer, side by side (the GPU is free while fla's warm-up workers compile): memcheck
# over every chunk_gla, chunk_simple_gla and chunk_gated_delta_rule case; racecheck over two
# chunk_gla cases and chunk_delta_rule's fixed-length, varlen, 72-head and dense 64-head cases (the
# last at K = 128 and 256: the mma.sync passes' single-buffered variant, the K = 256 column
# passes; the varlen one at K = 256, 640 blocks, is left to compare_variants.sh). The logs go
# with the warm-up logs (warm_logs.tgz), the summary to $OUT/sanitizers.txt.
if [ "${SANITIZE:-1}" = 1 ]; then
  san() {
    local tool=$1 test=$2 filter=$3
    timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$BUILD/tests/kernels/$test" \
      --gtest_filter="$filter" > "$STATE/$tool.$test.log" 2>&1
    local rc=$?
    echo "compute-sanitizer $tool $test ($filter): rc=$rc;" \
      "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$STATE/$tool.$test.log" | tail -1)"
  }
  {
    san memcheck chunk_gla_test '*' &
    san memcheck chunk_simple_gla_test '*' &
    san memcheck chunk_gated_delta_rule_test '*' &
    san racecheck chunk_gla_test '*T130*:*T263*' &
    san racecheck chunk_delta_rule_test '*T100*:*T263*varlen5_states*:*H72*:*T130_H64*' &
    wait
  } | tee "$OUT/sanitizers.txt"
  [ "$(grep -c 'rc=0;' "$OUT/sanitizers.txt")" = 5 ] || status=1
  echo "$(elapsed) sanitizers done (status $status)"
fi

PYTHONUNBUFFERED=1 python3 "$bench_py" run --binary "$BUILD/chunk_attention_benchmark" \
  --state-dir "$STATE" --deadline $((start + BUDGET - 20)) > "$OUT/kernels_vs_fla.log" 2>&1
echo "$(elapsed) timing done"
python3 "$bench_py" table "$OUT/kernels_vs_fla.log" | tee "$OUT/table.txt"
tar -czf "$OUT/warm_logs.tgz" -C "$STATE" . 2> /dev/null
exit $status
