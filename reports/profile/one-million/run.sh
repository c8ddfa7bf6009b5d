#!/usr/bin/env bash
# The gateway's CPU per served search and the served pipeline's latency at 1,000,000 documents (issue 33's floors:
# the gateway's own CPU per search <= 10 ms, the served pipeline <= 40 ms p50, at 1M).
#
#   reports/profile/one-million/setup.sh      (once: the home, /tmp/onem-home)
#   reports/profile/one-million/run.sh        (from the checkout's root; about 7 minutes at the defaults)
#
# On the home of setup.sh, with its own Redis (port 6396), a CPU worker (ESRR_DEVICE=cpu, one torch thread,
# queue onem) and a gateway (`esrr serve`), in turn:
#   (a) stages.json       reports/profile/stages.py: each stage's thread CPU per search, in-process
#   (b) bench-http.json   `esrr bench http`, one search at a time: latency, took, searches/s and the gateway's own
#                         CPU per search (gateway_cpu_ms, from its threads' schedstat; never the worker's scoring)
#       gateway.svg       with py-spy on the PATH: reports/profile/flame.sh's flame graph of that gateway, and
#                         gateway.collapsed.gz, its samples (stacks.py sums them by stage)
#   (c) served-pipeline.json   the in-process served pipeline p50 as `esrr bench scale` measures it
#                         (served_pipeline.py: BM25 top-500, the model scored in-process, no broker)
#   summary.json          the figures against the floors; each step's wall seconds and load average around it
# The worker and gateway stop before (c), so that only the pipeline runs then.
#
# Environment: ONEM_HOME (/tmp/onem-home), ONEM_OUT (reports/profile/one-million/run), ONEM_QUERIES (324 dev
# queries for (a) and (b)), ONEM_ROUNDS (2 timed passes), ONEM_SCALE_QUERIES and ONEM_SCALE_ROUNDS (100 and 2:
# scale.py's defaults, for (c)), ONEM_FLAME (1; 0 skips the flame graph), ONEM_PORT (8396, the gateway),
# PYTHON (the project's venv, or `python`). py-spy, if not installed: pip install --target /tmp/onem-pyspy py-spy,
# then PATH=$PATH:/tmp/onem-pyspy/bin.
set -euo pipefail
cd "$(dirname "$0")/../../.."
home=${ONEM_HOME:-/tmp/onem-home}
out=${ONEM_OUT:-reports/profile/one-million/run}
queries=${ONEM_QUERIES:-324} rounds=${ONEM_ROUNDS:-2}
scale_queries=${ONEM_SCALE_QUERIES:-100} scale_rounds=${ONEM_SCALE_ROUNDS:-2}
port=${ONEM_PORT:-8396} redis_port=6396
python=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python)}
[[ -f $home/models/delta-32-lex3-window.pt ]] || { echo "no served home at $home: run setup.sh first" >&2; exit 1; }
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHON=$python
export ESRR_HOME=$home ESRR_BROKER_URL=redis://127.0.0.1:$redis_port/0 ESRR_QUEUE=onem
export ESRR_DEVICE=cpu ESRR_TORCH_THREADS=1
# Heavy searches (a `q=` with a wildcard: some dev queries end in "?") in the gateway's own process, so that
# stages.py's thread and bench http's process see all of a search's CPU; a deadline a loaded machine meets.
export ESRR_GATEWAY_HEAVY_PROCESS=false ESRR_SCORE_DEADLINE_S=${ESRR_SCORE_DEADLINE_S:-10}
esrr=("$python" -c "from es_rerank.cli import main; main()")  # an array: `&` then gives the process's own pid
stamp() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
logs=$(mktemp -d /tmp/onem-run-XXXXXX)
mkdir -p "$out"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap cleanup EXIT
wait_for() {  # wait_for SECONDS WHAT COMMAND...
    local limit=$1 what=$2 t0=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        (( SECONDS - t0 > limit )) && { echo "gave up waiting for $what after $limit s" >&2; return 1; }
        sleep 0.5
    done
}
load() { cut -d' ' -f1 /proc/loadavg; }
steps=() load0=$(load)
step() {  # step NAME COMMAND...: run it, keep its wall seconds and the 1-minute load average before and after
    local name=$1 before t0=$SECONDS
    shift
    before=$(load)
    stamp "$name"
    "$@"
    steps+=("\"$name\": {\"seconds\": $((SECONDS - t0)), \"load\": [$before, $(load)]}")
}

redis_up() { $python -c "import redis; redis.Redis(port=$redis_port).ping()"; }
if ! redis_up 2>/dev/null; then
    redis-server --port $redis_port --bind 127.0.0.1 --save "" --appendonly no --logfile "$logs/redis.log" &
    pids+=($!)
    wait_for 20 "Redis on $redis_port" redis_up
fi
"${esrr[@]}" worker start >"$logs/worker.log" 2>&1 &
pids+=($!)
wait_for 300 "the worker (log: $logs/worker.log)" grep -q " ready\." "$logs/worker.log"

step stages $python reports/profile/stages.py --queries "$queries" --rounds "$rounds" --json-out "$out/stages.json"

"${esrr[@]}" serve --port "$port" >"$logs/gateway.log" 2>&1 &
pids+=($!)
health() { curl -sf "http://127.0.0.1:$port/_esrr/health"; }
wait_for 120 "the gateway (log: $logs/gateway.log)" health
step bench_http "${esrr[@]}" bench http --url "http://127.0.0.1:$port" --queries "$queries" --rounds "$rounds" \
    --json-out "$out/bench-http.json"
if [[ ${ONEM_FLAME:-1} == 1 ]] && command -v py-spy >/dev/null; then
    name=$(realpath --relative-to=reports/profile "$out")/gateway
    step flame env QUERIES="$queries" reports/profile/flame.sh "$port" "$name"
    $python reports/profile/stacks.py "$out/gateway.collapsed.gz" | tee "$out/gateway-stacks.txt"
elif [[ ${ONEM_FLAME:-1} == 1 ]]; then
    stamp "no py-spy on the PATH: no flame graph (pip install --target /tmp/onem-pyspy py-spy)"
fi
cleanup  # the worker and the gateway; (c) scores in its own process

step served_pipeline $python reports/profile/one-million/served_pipeline.py --home "$home" \
    --queries "$scale_queries" --rounds "$scale_rounds" --json-out "$out/served-pipeline.json"

steps+=("\"whole run\": {\"seconds\": $SECONDS, \"load\": [$load0, $(load)]}")
steps_json="{$(IFS=,; echo "${steps[*]}")}"
$python reports/profile/one-million/summary.py "$out" --home "$home" --steps "$steps_json" | tee "$out/summary.txt"
rm -rf "$logs"
