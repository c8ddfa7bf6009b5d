#!/usr/bin/env bash
# GPU scoring benchmark (needs CUDA): the sparse layout, the dense layout and the dense
# layout replayed as CUDA graphs, interleaved in 3 rounds on one machine, 500 documents
# per query, one query and 8 batched. JSON rows go to $1 (default reports/bench/gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-reports/bench/gpu}"
mkdir -p "$out"
for round in 1 2 3; do
    for mode in sparse dense-eager dense-graphs; do
        case $mode in
            sparse) args=(--layout sparse) ;;
            dense-eager) args=(--layout dense --no-cuda-graphs) ;;
            dense-graphs) args=(--layout dense --cuda-graphs) ;;
        esac
        "${PYTHON:-python3}" -m benchmarks.score --device cuda "${args[@]}" --reps 200 --batch-queries 8 \
            --json-out "$out/$mode-run$round.json"
    done
done
