#!/usr/bin/env bash
# The main job on the embedded default (no Elasticsearch, no docker): set up,
# build the NFCorpus index if none is served and the judged-neighbour votes if missing,
# and answer a search from the shell, reranked by Delta-32-Lex3 when a trained model
# exists (`--train` trains one first), refined by the candidate feedback, with the votes added.
set -euo pipefail
cd "$(dirname "$0")/.."
train=0
if [[ "${1:-}" == "--train" ]]; then train=1; shift; fi
query="${1:-green tea and breast cancer}"  # not a training query: its votes come from related ones
bash scripts/setup.sh model
. .venv/bin/activate
if ! esrr index versions 2>/dev/null | grep -q '\*'; then
    esrr index build
fi
esrr neighbours build --keep-existing  # votes from the NFCorpus train judgments (seconds)
if [[ $train == 1 ]]; then
    esrr embeddings train
    esrr train --variant delta-32-lex3-window  # the served default; `--variant delta-32-lex3` trains the paper's
fi
esrr search -- "$query"  # `--`: a query may start with a dash
