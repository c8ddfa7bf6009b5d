#!/usr/bin/env bash
# The shifted-NFCorpus evaluation of docs/quality.md ("Collections it has never seen"): the paper's
# Delta-32-Lex3 and the window-standardised variant, each as search serves it (BM25 guard, candidate
# feedback, judged-neighbour votes where they belong), on NFCorpus and its three shifted copies.
#
#   bash reports/experiments/transfer/run.sh dev|test      # from the repository, with .venv active
#   MODELS="delta-32-lex3-seed14 delta-32-lex3-window-seed14" bash reports/experiments/transfer/run.sh dev
#                          # other checkpoints of <home>/models (topic-disjoint only where its home has them)
#
# Needs in ESRR_HOME (default ./artifacts): the NFCorpus index, the embeddings, both models
# (`esrr train --variant delta-32-lex3`, `esrr train --variant delta-32-lex3-window`) and the votes
# (`esrr neighbours build`). Builds once, beside them: the shifted copies (`esrr shift`) and a home
# for the topic-disjoint split with its own index, votes and both models trained on its train split
# (two trainings, one thread each). Writes reports/transfer/SPLIT/CONDITION/MODEL/ and summary.md.
set -euo pipefail
cd "$(dirname "$0")/../../.."
split="${1:?usage: run.sh dev|test}"
home="${ESRR_HOME:-artifacts}"
shifted="${ESRR_SHIFT_DIR:-$home/shifted}"
topic_home="${ESRR_TOPIC_HOME:-$home/topic-disjoint}"
nfcorpus="${ESRR_NFCORPUS:-../shared/data/nfcorpus}"
out="reports/transfer/$split"
export OMP_NUM_THREADS=1  # shared machines: one thread per process, and deterministic training

[[ -d "$shifted/topic-disjoint" ]] || esrr shift --data "$nfcorpus" --out "$shifted"
[[ -d "$shifted/bc5cdr-pseudo" ]] || esrr shift --data "$nfcorpus" --out "$shifted" \
    --condition ohsumed-pseudo --condition bc5cdr-pseudo  # judgment-free: titles as queries, test split only
if [[ ! -f "$topic_home/models/delta-32-lex3-window.pt" ]]; then
    mkdir -p "$topic_home"
    cp -r "$home/embeddings" "$topic_home/"
    ESRR_HOME="$topic_home" esrr index build --data "$shifted/topic-disjoint"
    ESRR_HOME="$topic_home" esrr neighbours build --data "$shifted/topic-disjoint"
    ESRR_HOME="$topic_home" esrr train --data "$shifted/topic-disjoint" --variant delta-32-lex3
    ESRR_HOME="$topic_home" esrr train --data "$shifted/topic-disjoint" --variant delta-32-lex3-window
fi

for model in ${MODELS:-delta-32-lex3 delta-32-lex3-window}; do
    pseudo=""
    [[ $split == test ]] && pseudo="ohsumed-pseudo bc5cdr-pseudo"
    for condition in standard vid-desc no-titles $pseudo; do
        data="$shifted/$condition"
        [[ $condition == standard ]] && data="$nfcorpus"
        ESRR_HOME="$home" ESRR_CHECKPOINT="$home/models/$model.pt" \
            esrr eval --data "$data" --split "$split" --out "$out/$condition/$model" | tail -n 1
    done
    [[ -f "$topic_home/models/$model.pt" ]] || continue
    ESRR_HOME="$topic_home" ESRR_CHECKPOINT="$topic_home/models/$model.pt" \
        esrr eval --data "$shifted/topic-disjoint" --split "$split" --out "$out/topic-disjoint/$model" | tail -n 1
done
python reports/experiments/transfer/summarize.py "$out" > "$out/summary.md"
cat "$out/summary.md"
