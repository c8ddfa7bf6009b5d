#!/usr/bin/env bash
# The production path end to end on one CUDA machine, timed, in one run:
#   1. build the embedded NFCorpus index and the judged-neighbour votes, train word2vec
#      (`esrr embeddings train`, one thread per core) and Delta-32-Lex3 on the GPU
#      (`esrr train --device cuda`);
#   2. start redis-server, the real Celery worker on CUDA (`esrr worker start`, ESRR_DEVICE=cuda)
#      and the gateway (`esrr serve`); send 20 NFCorpus dev queries over HTTP and check that
#      the worker reranked them (esrr.ranker, no esrr.fallback); time them and
#      `esrr bench http` (1 and 4 in flight) and `esrr bench roundtrip`; compare the GPU
#      worker's scores (through Redis, alone and batched) with the CPU scorer's and the
#      reference DeltaModel.forward's on the CPU, for the same requests;
#   3. `pytest -m gpu` on the test files that hold GPU tests, then `python -m benchmarks.score`
#      once per scorer layout; last, as time allows, one CPU training epoch to compare.
# Everything goes to $OUT (default reports/gpu/run-<date>): e2e.log (all output),
# results.json (timings and figures), worker.log, gateway.log, pytest-gpu.log, bench-scorer.log.
#
# What it needs beside the repository (the device machine has python3 with torch, numpy,
# scipy, click, tqdm, flask's werkzeug/jinja2, prometheus-client, pytest, matplotlib, urllib3):
#   .whl/                    the missing Python packages as cp312 manylinux wheels (celery, kombu,
#                            billiard, vine, amqp, redis, pydantic(+core, -settings), tantivy, gensim,
#                            flask, waitress, elasticsearch, ir_measures, ...: see reports/gpu/README.md)
#   .gpu-data/bundle.tar.xz  data/ (nfcorpus: corpus.jsonl.gz, queries.jsonl, qrels/*.tsv,
#                            original/qrels/train.2-1-0.qrel; word2vec text: ohsumed-single23,
#                            medical-abstracts-tc, bc5cdr; evidence-inference-pmc left out for size)
#                            and redis/ (redis-server; min/ and all/: the shared libraries ldd names)
# Both folders are ignored (.git/info/exclude); carry them: run(carry=[".whl", ".gpu-data/bundle.tar.xz"]).
# Preparing them (on an x86-64 machine with network; the versions of .venv's `pip list`):
#   printf '/.whl/\n/.gpu-data/\n' >>.git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 -d .whl celery==5.7.0 kombu==5.7.0 ... (the list in reports/gpu/README.md)
#   stage=.gpu-data/stage: $stage/data/ as ../shared/data laid out (nfcorpus/{corpus.jsonl.gz,queries.jsonl,
#   qrels/,original/qrels/train.2-1-0.qrel}, ohsumed-single23/, medical-abstracts-tc/, bc5cdr/), $stage/redis/
#   redis-server (cp -L /usr/bin/redis-server), $stage/redis/min/ (libatomic, liblzf, libjemalloc) and
#   $stage/redis/all/ (the other non-libc libraries `ldd redis-server` lists); then
#   (cd $stage && tar -cJf ../bundle.tar.xz data redis)
# On the device: `bash scripts/gpu-e2e.sh`. A CPU rehearsal (no wheels, the project's .venv):
#   E2E_DEVICE=cpu E2E_WHEELS=0 PYTHON=$PWD/.venv/bin/python OUT=/tmp/e2e \
#   E2E_W2V_ARGS="--limit-docs 300 --epochs 1" E2E_TRAIN_ARGS="--train-queries 100 --dev-queries 40 --max-epochs 1" \
#   E2E_BENCH_QUERIES=30 E2E_BUDGET_S=3000 \
#   bash scripts/gpu-e2e.sh
# The second device run of reports/gpu/ (the fixed GPU test, GPU and CPU training timed on one machine):
#   E2E_SERVE=0 E2E_BENCH=0 E2E_W2V_ARGS="--epochs 1" E2E_TRAIN_ARGS="--max-epochs 2" bash scripts/gpu-e2e.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export OUT=${OUT:-$ROOT/reports/gpu/run-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/e2e.log") 2>&1

DEVICE=${E2E_DEVICE:-cuda}
WORK=${E2E_WORK:-/tmp/esrr-e2e}
BUDGET_S=${E2E_BUDGET_S:-330}  # optional steps start only before this many seconds
PY=${PYTHON:-python3}
REDIS_PORT=${E2E_REDIS_PORT:-6391}
HTTP_PORT=${E2E_HTTP_PORT:-8011}
N_QUERIES=${E2E_QUERIES:-20}
BENCH_QUERIES=${E2E_BENCH_QUERIES:-324}
W2V_ARGS=${E2E_W2V_ARGS:-}
TRAIN_ARGS=${E2E_TRAIN_ARGS:-}
rm -rf "$WORK" && mkdir -p "$WORK/bin"
STEPS=$WORK/steps.tsv
: >"$STEPS"

step() {  # step NAME COMMAND...: run, time, record "NAME rc seconds"
    local name=$1 t0=$EPOCHREALTIME rc
    shift
    echo "=== [$SECONDS s] $name: $*"
    "$@"
    rc=$?
    local took
    took=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
    printf '%s\t%s\t%s\n' "$name" "$rc" "$took" >>"$STEPS"
    echo "=== [$SECONDS s] $name: exit $rc in $took s"
    collect
    return $rc
}
has_time() { (( SECONDS + $1 < BUDGET_S )) || { echo "=== skipped ($1 s would pass the ${BUDGET_S} s budget): $2"; return 1; }; }

collect() {  # results.json from what the steps left in $WORK; after every step, so a killed run keeps them
    local log
    for log in worker gateway; do  # the worker logs every task's scores: keep its head and tail
        [[ -f $WORK/$log.log ]] || continue
        { head -n 80 "$WORK/$log.log"; echo "[... $(wc -l <"$WORK/$log.log") lines in all ...]"; tail -n 30 "$WORK/$log.log"; } >"$OUT/$log.log"
    done
    "$PY" - "$WORK" "$OUT" "$DEVICE" "${1:-}" <<'EOF'
import glob, json, os, subprocess, sys
work, out, device = sys.argv[1:4]
res = {"device_asked": device, "steps": {}}
for line in open(os.path.join(work, "steps.tsv")):
    name, rc, took = line.rstrip("\n").split("\t")
    res["steps"][name] = {"rc": int(rc), "seconds": float(took)}
for name in sorted(glob.glob(os.path.join(work, "*.json"))):
    try:
        res[os.path.basename(name)[:-5]] = json.load(open(name))
    except ValueError as error:
        res[os.path.basename(name)[:-5]] = f"unreadable: {error}"
home = os.path.join(work, "home")
for path in glob.glob(os.path.join(home, "models", "*.json")):
    if os.path.basename(path) != "judged-neighbours.json":
        res["training:" + os.path.basename(path)[:-5]] = json.load(open(path))
for path in glob.glob(os.path.join(home, "embeddings", "*", "meta.json")):
    meta = json.load(open(path))
    res["word2vec"] = {k: meta.get(k) for k in ("version", "params", "rows", "corpus", "seconds", "sources")}
worker_log = os.path.join(work, "worker.log")
if os.path.exists(worker_log):
    lines = open(worker_log, errors="replace").read().splitlines()
    res["worker_log"] = {"lines": len(lines), "tasks_succeeded": sum(" succeeded in " in l for l in lines),
                         "errors": [l[:300] for l in lines if any(w in l for w in ("ERROR", "CRITICAL", "Traceback"))][:20]}
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1, default=str)
if sys.argv[4] == "final":
    print(json.dumps(res["steps"]))
EOF
}
PIDS=()
stop_services() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${PIDS[@]}"; do timeout 20 tail --pid="$pid" -f /dev/null 2>/dev/null || kill -KILL "$pid" 2>/dev/null; done
    PIDS=()
}
trap 'stop_services; collect final' EXIT

# -- 0. the machine and the packages --------------------------------------------------
echo "e2e on $(uname -n) $(date -u +%FT%TZ); device $DEVICE; python $("$PY" -V 2>&1)"
nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
if [[ ${E2E_WHEELS:-1} == 1 ]]; then
    step wheels "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" .whl/*.whl || exit 1
    export PYTHONPATH=$WORK/site:$ROOT
else
    export PYTHONPATH=$ROOT
fi
cat >"$WORK/bin/esrr" <<EOF
#!/bin/sh
exec "$PY" -c 'import sys; sys.argv[0] = "esrr"; from es_rerank.cli import main; main()' "\$@"
EOF
chmod +x "$WORK/bin/esrr"
export PATH=$WORK/bin:$PATH
unpack() { tar -xJf "$1" -C "$2" 2>/dev/null || "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; }
step unpack unpack .gpu-data/bundle.tar.xz "$WORK" || exit 1
DATA=$WORK/data
export ESRR_HOME=$WORK/home ESRR_NFCORPUS=$DATA/nfcorpus ESRR_QUEUE=e2e
export ESRR_BROKER_URL=redis://127.0.0.1:$REDIS_PORT/0 PYTHONUNBUFFERED=1
"$PY" - >"$WORK/machine.json" <<'EOF'
import json, os, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
        "cpus": os.cpu_count()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), sms=p.multi_processor_count)
print(json.dumps(info))
EOF
cat "$WORK/machine.json"

# -- 1. index, votes, word2vec, model ---------------------------------------------------
step index timeout 120 esrr index build --data "$DATA/nfcorpus" || exit 1
step neighbours timeout 120 esrr neighbours build || exit 1
step word2vec timeout 200 esrr embeddings train --data "$DATA" --workers "$(nproc)" $W2V_ARGS || exit 1
if ! step train timeout 200 esrr train --variant delta-32-lex3 --device "$DEVICE" $TRAIN_ARGS; then
    echo "=== training on $DEVICE failed: two epochs on the CPU instead, so the serving checks still run"
    step train_cpu_fallback timeout 200 esrr train --variant delta-32-lex3 --device cpu --max-epochs 2 $TRAIN_ARGS || exit 1
fi

# -- 2. Redis, the Celery worker, the gateway, searches over HTTP --------------------------
if [[ ${E2E_SERVE:-1} == 1 ]]; then  # E2E_SERVE=0 leaves part 2 out
REDIS_LIBS=$WORK/redis/min
if ! command -v ldd >/dev/null || LD_LIBRARY_PATH=$REDIS_LIBS ldd "$WORK/redis/redis-server" | grep -q "not found"; then
    REDIS_LIBS=$REDIS_LIBS:$WORK/redis/all
fi
LD_LIBRARY_PATH=$REDIS_LIBS ldd "$WORK/redis/redis-server" 2>&1 | grep -E "not found|redis" || true
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2 t0=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        (( SECONDS - t0 > limit )) && { echo "gave up waiting for $what after $limit s"; return 1; }
        sleep 0.5
    done
    echo "$what after $((SECONDS - t0)) s"
}
redis_up() { "$PY" -c "import redis, sys; redis.Redis(port=$REDIS_PORT).ping()"; }
LD_LIBRARY_PATH=$REDIS_LIBS "$WORK/redis/redis-server" --port "$REDIS_PORT" --bind 127.0.0.1 --save "" \
    --appendonly no --logfile "$WORK/redis.log" &
PIDS+=($!)
step redis wait_for 20 "redis answers" redis_up || { cat "$WORK/redis.log"; exit 1; }

ESRR_DEVICE=$DEVICE esrr worker start >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
step worker_ready wait_for 120 "worker ready" grep -q " ready\." "$WORK/worker.log" || { cat "$WORK/worker.log"; exit 1; }
grep -E "^(device|model|checkpoint|embeddings|pool|broker)" "$WORK/worker.log"

esrr serve --port "$HTTP_PORT" >"$WORK/gateway.log" 2>&1 &
PIDS+=($!)
health() { "$PY" -c "
import json, sys, urllib.request
body = json.load(urllib.request.urlopen('http://127.0.0.1:$HTTP_PORT/_esrr/health', timeout=10))
sys.exit(body.get('status') != 'green')"; }
step gateway_green wait_for 90 "gateway green" health || { cat "$WORK/gateway.log"; exit 1; }
http_get() { "$PY" -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())" "$1"; }
http_get "http://127.0.0.1:$HTTP_PORT/_esrr/health"; echo
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null || true

step searches "$PY" - "$HTTP_PORT" "$N_QUERIES" "$WORK/searches.json" <<'EOF'
import json, statistics, sys, time, urllib.parse, urllib.request
from es_rerank.settings import CommonSettings
from index_setup.nfcorpus import NFCorpus
port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
queries = sorted(NFCorpus.locate(None, CommonSettings()).queries("dev").items())[:n]
rows, bad = [], []
for qid, text in queries:
    url = f"http://127.0.0.1:{port}/_search?" + urllib.parse.urlencode({"q": text, "size": 10})
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = json.load(response)
    ms = (time.perf_counter() - t0) * 1000
    hits = body["hits"]["hits"]
    row = {"id": qid, "query": text, "ms": round(ms, 2), "took": body["took"], "ranker": body["esrr"]["ranker"],
           "fallback": body["esrr"].get("fallback"), "total": body["hits"]["total"]["value"], "shown": len(hits),
           "reranked_shown": sum(h["fields"]["reranked"][0] for h in hits),
           "top": [h["_id"] for h in hits[:3]]}
    rows.append(row)
    if hits and (row["fallback"] or row["ranker"] == "BM25" or not row["reranked_shown"]):
        bad.append(qid)
ms = sorted(r["ms"] for r in rows)
summary = {"queries": len(rows), "with_hits": sum(r["shown"] > 0 for r in rows), "not_reranked": bad,
           "rankers": sorted({r["ranker"] for r in rows}), "fallbacks": sum(bool(r["fallback"]) for r in rows),
           "latency_ms": {"p50": statistics.median(ms), "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
                          "min": ms[0], "max": ms[-1]},
           "took_ms_p50": statistics.median(r["took"] for r in rows), "rows": rows}
json.dump(summary, open(path, "w"), indent=1)
for r in rows:
    print(f"{r['id']:>10} {r['ms']:7.1f} ms took {r['took']:4d} {r['ranker']:<16} reranked {r['reranked_shown']:2d}/"
          f"{r['shown']:2d} of {r['total']:3d} {r['fallback'] or ''} {r['query'][:40]!r}")
print({k: v for k, v in summary.items() if k != "rows"})
sys.exit(1 if bad else 0)
EOF
step search_cli timeout 60 esrr search --worker --json -k 3 "green tea and breast cancer"

step compare "$PY" - "$N_QUERIES" "$DEVICE" "$WORK/compare.json" <<'EOF'
"""The GPU worker's scores (through Redis, one at a time and all at once) against the CPU's, same requests."""
import json, sys, time
import numpy as np, torch
from es_rerank.backends import open_backend
from es_rerank.payload import TASK_NAME, build_request, encode, result_scores
from es_rerank.settings import CommonSettings
from index_setup.nfcorpus import NFCorpus
from worker.celery_app import create_app
from worker.runtime import Runtime
from worker.settings import WorkerSettings
n, device, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
settings = WorkerSettings()
backend = open_backend(settings)
requests = []
for qid, text in sorted(NFCorpus.locate(None, CommonSettings()).queries("dev").items()):
    hits = backend.search(text, 500)
    if hits:
        requests.append((qid, build_request(text, [h.terms for h in hits], backend.stats, settings.lex_features)))
    if len(requests) == n:
        break
app = create_app(settings)
one_by_one = []
for qid, request in requests:
    t0 = time.perf_counter()
    result = app.send_task(TASK_NAME, args=[encode(request)], queue=settings.queue).get(timeout=60)
    one_by_one.append((result, (time.perf_counter() - t0) * 1000))
pending = [app.send_task(TASK_NAME, args=[encode(request)], queue=settings.queue) for _, request in requests]
together = [p.get(timeout=60) for p in pending]
cpu = Runtime.load(settings.model_copy(update={"device": "cpu", "batch_wait_ms": 0.0}))
model = cpu.checkpoint.build_model(cpu.embeddings.vectors)
rows, worst = [], {"worker_vs_cpu_scorer": 0.0, "worker_vs_cpu_reference": 0.0, "batched_vs_alone": 0.0,
                   "cpu_scorer_vs_reference": 0.0}
for (qid, request), (alone, ms), batched in zip(requests, one_by_one, together):
    got = result_scores(alone, request.n)
    got_batched = result_scores(batched, request.n)
    want = cpu.score(request)
    q, d, lex = cpu.prepare(request)
    with torch.no_grad():
        ref = model(torch.from_numpy(d), torch.from_numpy(q)[None].expand(len(d), -1), torch.from_numpy(lex)).numpy()
    diffs = {"worker_vs_cpu_scorer": float(np.abs(got - want).max()),
             "worker_vs_cpu_reference": float(np.abs(got - ref).max()),
             "batched_vs_alone": float(np.abs(got_batched - got).max()),
             "cpu_scorer_vs_reference": float(np.abs(want - ref).max())}
    for key, value in diffs.items():
        worst[key] = max(worst[key], value)
    same_order = bool((np.argsort(-got, kind="stable")[:20] == np.argsort(-ref, kind="stable")[:20]).all())
    rows.append({"id": qid, "docs": request.n, "model": alone["model"], "roundtrip_ms": round(ms, 2),
                 "worker_took_ms": alone["took_ms"], "batch_alone": alone["batch"], "batch_together": batched["batch"],
                 "top20_same_order": same_order, **diffs})
    print(rows[-1])
summary = {"device": device, "requests": len(rows), "max_abs_diff": worst,
           "batches_when_sent_together": sorted({r["batch_together"] for r in rows}),
           "roundtrip_ms_p50": float(np.median([r["roundtrip_ms"] for r in rows])),
           "worker_took_ms_p50": float(np.median([r["worker_took_ms"] for r in rows])),
           "top20_same_order": sum(r["top20_same_order"] for r in rows), "rows": rows}
json.dump(summary, open(path, "w"), indent=1)
print({k: v for k, v in summary.items() if k != "rows"})
sys.exit(0 if max(worst.values()) < 1e-4 else 1)
EOF

step bench_http_c1 timeout 120 esrr bench http --url "http://127.0.0.1:$HTTP_PORT" --rounds 2 --concurrency 1 --queries "$BENCH_QUERIES" \
    --json-out "$WORK/bench-http-c1.json"
has_time 40 "bench http c4" && step bench_http_c4 timeout 120 esrr bench http --url "http://127.0.0.1:$HTTP_PORT" \
    --rounds 2 --concurrency 4 --queries "$BENCH_QUERIES" --json-out "$WORK/bench-http-c4.json"
has_time 60 "bench roundtrip" && step bench_roundtrip timeout 150 esrr bench roundtrip --queries "$BENCH_QUERIES" \
    --concurrency 1,8 --json-out "$WORK/bench-roundtrip.json"
http_get "http://127.0.0.1:$HTTP_PORT/metrics" | grep -E "^esrr_model_fallbacks_total|^esrr_requests_total" | head -5
stop_services
tail -n 3 "$WORK/worker.log" | cut -c1-300

fi

# -- 3. the GPU tests, the scorer benchmark, a CPU epoch ----------------------------------
GPU_TESTS=$(grep -rl "mark.gpu" tests | sort)
has_time 40 "pytest -m gpu" && step pytest_gpu timeout 150 "$PY" -m pytest -m gpu -q -p no:cacheprovider \
    $GPU_TESTS 2>&1 | tee "$OUT/pytest-gpu.log"
if [[ $DEVICE == cuda* && ${E2E_BENCH:-1} == 1 ]]; then  # E2E_BENCH=0 leaves the scorer benchmark out
    for args in "sparse" "dense --no-cuda-graphs" "dense --cuda-graphs"; do
        name=bench-scorer-${args// /}
        has_time 25 "benchmarks.score $args" && step "${name//-/_}" timeout 90 "$PY" -m benchmarks.score --device "$DEVICE" \
            --layout $args --reps 100 --batch-queries 8 --json-out "$WORK/$name.json" 2>&1 | tee -a "$OUT/bench-scorer.log"
    done
fi
has_time 120 "one CPU training epoch" && step train_cpu_epoch timeout 150 esrr train --variant delta-32-lex3 \
    --device cpu --max-epochs 1 --suffix=-cpu-epoch $TRAIN_ARGS
echo "=== done in $SECONDS s"
