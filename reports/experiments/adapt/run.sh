#!/usr/bin/env bash
# `esrr train --adapt` measured (docs/quality.md, "Adaptation without judgments"): the served model fine-tuned
# on a collection's own titles, then served and adapted side by side with `esrr eval --adapted` on NFCorpus and
# its shifted copies (adapted to NFCorpus's documents, which all of them share) and on the pseudo-query
# collections of NFCorpus and OHSUMED (adapted to each; their test titles are never trained on or chosen with).
#
#   bash reports/experiments/adapt/run.sh dev     # adapt (no test) and compare on every dev split
#   bash reports/experiments/adapt/run.sh test    # once, with the settings chosen on dev
#   ADAPT_SUFFIX=-rank ADAPT_OPTIONS="--negatives rank" bash reports/experiments/adapt/run.sh dev   # another setting
#
# Needs in ESRR_HOME (default ./artifacts) what reports/experiments/transfer/run.sh needs (the index, the
# embeddings, the served window model, the votes); builds the shifted copies and a titled OHSUMED corpus once.
# With a topic-disjoint home (ESRR_TOPIC_HOME, made by the transfer run.sh) its model is adapted and compared too.
set -euo pipefail
cd "$(dirname "$0")/../../.."
split="${1:?usage: run.sh dev|test}"
home="${ESRR_HOME:-artifacts}"
shifted="${ESRR_SHIFT_DIR:-$home/shifted}"
topic_home="${ESRR_TOPIC_HOME:-$home/topic-disjoint}"
nfcorpus="${ESRR_NFCORPUS:-../shared/data/nfcorpus}"
suffix="${ADAPT_SUFFIX:-}"
read -r -a options <<< "${ADAPT_OPTIONS:-}"
out="reports/adapt/$split$suffix"
export OMP_NUM_THREADS=1  # shared machines: one thread per process, and deterministic training

[[ -d "$shifted/no-titles" ]] || esrr shift --data "$nfcorpus" --out "$shifted"
[[ -f "$home/text/ohsumed/corpus.jsonl.gz" ]] ||
    python reports/experiments/adapt/export_text.py ohsumed "$home/text/ohsumed"

adapt() {  # HOME COLLECTION NAME: the adapted checkpoint of HOME's served model (trained now if missing)
    local served="$1/models/delta-32-lex3-window.pt"
    local adapted="$1/models/delta-32-lex3-window-adapted-$3$suffix.pt"
    [[ -f "$adapted" ]] || ESRR_HOME="$1" ESRR_CHECKPOINT="$served" esrr train --adapt "$2" --no-adapt-test \
        ${suffix:+"--suffix=$suffix"} "${options[@]}" >&2
    echo "$adapted"
}
compare() {  # HOME DATA ADAPTED NAME
    ESRR_HOME="$1" ESRR_CHECKPOINT="$1/models/delta-32-lex3-window.pt" \
        esrr eval --data "$2" --split "$split" --adapted "$3" --out "$out/$4" | tail -n 2
}

nf=$(adapt "$home" "$nfcorpus" nfcorpus)
oh=$(adapt "$home" "$home/text/ohsumed" ohsumed)
for condition in standard vid-desc no-titles; do
    data="$shifted/$condition"
    [[ $condition == standard ]] && data="$nfcorpus"
    compare "$home" "$data" "$nf" "$condition"
done
compare "$home" "$home/adapt/nfcorpus-pseudo" "$nf" nfcorpus-pseudo
compare "$home" "$home/adapt/ohsumed-pseudo" "$oh" ohsumed-pseudo
if [[ -f "$topic_home/models/delta-32-lex3-window.pt" ]]; then
    td=$(adapt "$topic_home" "$shifted/topic-disjoint" topic-disjoint)
    compare "$topic_home" "$shifted/topic-disjoint" "$td" topic-disjoint
fi
python reports/experiments/adapt/summarize.py "$out" > "$out/summary.md"
cat "$out/summary.md"
