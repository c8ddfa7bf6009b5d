#!/usr/bin/env bash
# Flame graphs of a running gateway's CPU while `esrr bench http` searches it, one search at a time.
#
#   reports/profile/flame.sh PORT NAME     (py-spy: pip install py-spy; run as the gateway's user or root)
#
# QUERIES (default 324) sets how many dev queries each pass sends; NAME may name a folder under reports/profile/.
#
# Writes reports/profile/NAME.svg (py-spy's flame graph) and NAME.collapsed.gz (the same samples as collapsed
# stacks, which speedscope.app opens once gunzipped; reports/profile/stacks.py sums them by stage). Samples are
# taken only from the thread holding the GIL (--gil): the gateway's Python CPU; a waiting thread is not counted,
# nor native work done without the GIL (tantivy's search, a socket's send, zlib on a large buffer).
set -euo pipefail
port=$1 name=$2
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python}
pid=$($python -c "from benchmarks.gateway_process import serving_pid; print(serving_pid($port) or '')")
[[ -n $pid ]] || { echo "no gateway listens on port $port" >&2; exit 1; }
for format in flamegraph raw; do
    output=$here/$name.$([[ $format == raw ]] && echo collapsed || echo svg)
    py-spy record --pid "$pid" --gil --function --rate 200 --format "$format" --output "$output" --nonblocking &
    spy=$!
    sleep 2
    $python -c "from es_rerank.cli import main; main()" bench http --url "http://127.0.0.1:$port" --rounds 1 \
        --queries "${QUERIES:-324}" >/dev/null
    kill -INT $spy
    wait $spy || true
done
# Paths shortened to what follows site-packages/, the standard library or the checkout.
sed -E -i 's#\(/[^()]*/site-packages/#(#g; s#\(/[^()]*/lib/python3\.[0-9]+/#(#g; s#\(/[^()]*/(es_rerank|benchmarks|worker)/#(\1/#g' "$here/$name.collapsed"
gzip -9f "$here/$name.collapsed"
