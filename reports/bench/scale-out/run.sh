#!/usr/bin/env bash
# Issue 33, item 3: N gateway processes (`esrr serve --processes N`) over one worker, each N at 1 and 4
# searches in flight; the Ns take turns, in reverse order every other run, so that all meet the same moments' load.
#
#   bash reports/bench/scale-out/run.sh [REPETITIONS] [QUERIES] [ROUNDS] [FIRST]    (defaults 2, 162, 2, 1)
#
# Needs the served home of reports/profile/README.md ("Set-up") in the ESRR_* environment and a worker
# running on it (`esrr worker start`). Writes reports/bench/scale-out/N<n>-c<c>-run<r>.json and .txt (runs
# numbered from FIRST);
# `python reports/bench/scale-out/table.py` prints the medians over the runs. With ESRR_WORKER_PID (the
# `esrr worker start` process) it also records the worker's CPU over each bench, in N<n>-c<c>-run<r>.worker.
set -euo pipefail
cd "$(dirname "$0")/../../.."
repetitions=${1:-2} queries=${2:-162} rounds=${3:-2} first=${4:-1}
port=${ESRR_SCALE_PORT:-8490}
out=reports/bench/scale-out
# The longest dev queries are heavy searches (issue 32's lane): here they run in the gateway processes, four at
# a time, like the others, so that what scales is the gateway's processes, not the heavy lane's (one slot and a
# child process per gateway process by default, whose 429s would stop the bench). A deadline that a loaded
# machine's worker meets: a search that keeps BM25's order stops the bench too.
export ESRR_GATEWAY_HEAVY_PROCESS=false ESRR_GATEWAY_HEAVY_SLOTS=4 ESRR_GATEWAY_HEAVY_QUEUE=8
export ESRR_SCORE_DEADLINE_S=${ESRR_SCORE_DEADLINE_S:-10}
esrr=(python -c "from es_rerank.cli import main; main()")
worker_cpu() {  # the worker's CPU seconds so far, with its children's (0 without ESRR_WORKER_PID)
  python -c "import sys; from benchmarks.gateway_process import ProcessCpu; print(ProcessCpu(int(sys.argv[1])).seconds())" \
    "${ESRR_WORKER_PID:-0}" 2>/dev/null || echo 0
}
for run in $(seq "$first" $((first + repetitions - 1))); do
  order="1 2 4"; [ $((run % 2)) -eq 0 ] && order="4 2 1"  # the load moves: every other run the other way
  for n in $order; do
    "${esrr[@]}" serve --port "$port" --processes "$n" >"$out/serve-N$n.log" 2>&1 &
    server=$!
    trap 'kill -TERM $server 2>/dev/null' EXIT
    until curl -sf "http://127.0.0.1:$port/_esrr/health" >/dev/null; do
      kill -0 "$server" 2>/dev/null || { cat "$out/serve-N$n.log"; exit 1; }
      sleep 0.5
    done
    sleep 2  # every process up (the supervisor answers as soon as the first one does)
    for c in 1 4; do
      before=$(worker_cpu)
      "${esrr[@]}" bench http --url "http://127.0.0.1:$port" --gateway-pid "$server" --concurrency "$c" \
        --queries "$queries" --rounds "$rounds" --json-out "$out/N$n-c$c-run$run.json" | tee "$out/N$n-c$c-run$run.txt"
      # every query once untimed, ROUNDS timed passes and the one-at-a-time CPU pass
      if [ -n "${ESRR_WORKER_PID:-}" ]; then
        echo "$before $(worker_cpu) $((queries * (rounds + 2)))" >"$out/N$n-c$c-run$run.worker"
      fi
    done
    kill -TERM "$server"
    wait "$server" || true
  done
done
rm -f "$out"/serve-N*.log
