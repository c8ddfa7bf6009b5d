#!/usr/bin/env bash
# What an experiment costs a search: `esrr bench http` against two gateways on the same home, one without
# ESRR_EXPERIMENT and one with votes:<the served votes> (the costlier candidate), in alternation, three times each.
#   ESRR_HOME=/tmp/esrr-interleaving-floor-0/home bash reports/interleaving-floor/bench.sh > bench.txt
set -euo pipefail
esrr() { python -c "from es_rerank.cli import main; main()" "$@"; }
votes="$ESRR_HOME/models/judged-neighbours.json"
export ESRR_GATEWAY_RERANK=false ESRR_EVENTS=false
ESRR_EXPERIMENT= esrr serve --port 8741 >/tmp/esrr-bench-off.log 2>&1 & off=$!
ESRR_EXPERIMENT="votes:$votes" esrr serve --port 8742 >/tmp/esrr-bench-on.log 2>&1 & on=$!
trap 'kill $off $on' EXIT
for port in 8741 8742; do until curl -s -o /dev/null "http://127.0.0.1:$port/"; do sleep 0.5; done; done
for turn in 1 2 3; do
  for port in 8741 8742; do
    echo "== port $port ($([ $port = 8741 ] && echo off || echo on)), turn $turn"
    esrr bench http --url "http://127.0.0.1:$port" --queries 150 --rounds 2 2>&1 | grep -iE "p50|search|cpu" | head -8
  done
done
