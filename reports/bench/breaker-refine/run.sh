#!/usr/bin/env bash
# ESRR_BREAKER_REFINE true (the default) and false, alternated three times, under `esrr bench chaos`.
# ESRR_HOME: the embedded NFCorpus index (`esrr index build`), the votes (`esrr neighbours build`) and
# a random-weight model (random_model.py here): a skipped search never reaches the model.
set -euo pipefail
cd "$(dirname "$0")"
export ESRR_TORCH_THREADS=1
for run in 1 2 3; do
    for refine in true false; do
        ESRR_BREAKER_REFINE=$refine esrr bench chaos --phase-s 10 --clients 16 --outage-sends 2000 \
            --json-out "chaos-refine-$refine-run$run.json" > "chaos-refine-$refine-run$run.txt" 2>&1
    done
done
