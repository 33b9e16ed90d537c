#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install the pinned dependencies, build flame,
# start flamed on its embedded defaults (loopback, ~/.local/state/flame), submit the demo job
# (configs/jobs/demo.toml: a tiny GLA model trained on the fortunes corpus), watch it to the end,
# and print where its checkpoints, logs and metrics are.
#
# A flamed that is already running at the default address is reused; one started here keeps
# running after the script ends, so the metrics stay scrapeable (the script says how to stop it).
#
# Usage: deploy/demo.sh [extra `flamectl submit` arguments, e.g. --set training.steps=100]
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target flamed flame-worker flamectl demo_data

bin=build/release/bin
data_dir=${FLAME_DATA_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/flame}
export FLAME_DATA_DIR=$data_dir

flamed_pid=""
if ! "$bin/flamectl" list >/dev/null 2>&1; then
  mkdir -p "$data_dir"
  echo "demo: starting flamed (data in $data_dir, log in $data_dir/flamed.log)"
  setsid "$bin/flamed" --data_dir "$data_dir" >>"$data_dir/flamed.log" 2>&1 </dev/null &
  flamed_pid=$!
  for _ in $(seq 1 100); do
    "$bin/flamectl" list >/dev/null 2>&1 && break
    kill -0 "$flamed_pid" 2>/dev/null || { echo "demo: flamed exited; see $data_dir/flamed.log"; exit 1; }
    sleep 0.1
  done
fi

job_json=$("$bin/flamectl" submit configs/jobs/demo.toml -o json "$@")
job_id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$job_json")
echo "demo: submitted job $job_id; watching it (Ctrl-C stops watching, not the job)"
set +e
"$bin/flamectl" watch "$job_id"
watch_rc=$?
set -e

"$bin/flamectl" status "$job_id"
"$bin/flamectl" status "$job_id" -o json | python3 -c '
import json, sys
job = json.load(sys.stdin)
ckpts = job.get("checkpoints", [])
print("checkpoints:", ckpts[-1]["path"] if ckpts else "none", f"({len(ckpts)} committed)")
print("logs:       ", job.get("job_dir", "?") + "/logs")'
metrics=$(sed -n 's/^metrics=//p' "$data_dir/flamed.addr")
echo "metrics:     http://$metrics/metrics   (e.g. curl -s http://$metrics/metrics | grep $job_id)"
if [ -n "$flamed_pid" ]; then
  echo "flamed keeps running (pid $flamed_pid); stop it with: kill $flamed_pid"
fi
exit $watch_rc
