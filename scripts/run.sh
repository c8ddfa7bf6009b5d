#!/usr/bin/env bash
# The main job on the embedded default (no Elasticsearch, no docker): set up,
# build the NFCorpus index if none is served and the judged-neighbour votes if missing,
# and answer a search from the shell, reranked by Delta-32-Lex3 when a trained model
# exists (`--train` trains one first), with the votes added.
set -euo pipefail
cd "$(dirname "$0")/.."
train=0
if [[ "${1:-}" == "--train" ]]; then train=1; shift; fi
query="${1:-breast cancer cells feed on cholesterol}"
bash scripts/setup.sh model
. .venv/bin/activate
if ! esrr index versions 2>/dev/null | grep -q '\*'; then
    esrr index build
fi
if [[ ! -f "${ESRR_HOME:-artifacts}/models/judged-neighbours.json" ]]; then
    esrr neighbours build  # votes from the NFCorpus train judgments (seconds)
fi
if [[ $train == 1 ]]; then
    esrr embeddings train
    esrr train --variant delta-32-lex3
fi
esrr search "$query"
