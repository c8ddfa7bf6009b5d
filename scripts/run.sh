#!/usr/bin/env bash
# The main job on the embedded default (no Elasticsearch, no docker): set up, build the
# NFCorpus index if none is served and the judged-neighbour votes if missing, train the
# word2vec embeddings and Delta-32-Lex3 if no model is trained yet, and answer a search
# from the shell: reranked by Delta-32-Lex3, refined by the candidate feedback, with the
# votes added. Later runs reuse all of it and answer in seconds.
#
#   bash scripts/run.sh ["query"]              trains on the first run only
#   bash scripts/run.sh --train ["query"]      retrains the embeddings and the model
#   bash scripts/run.sh --reproduce ["query"]  retrains with the deterministic recipe (word2vec on
#                                              one thread: the same vectors on every run, slower)
#
# The repository ships no weights: the word2vec table alone is tens of MB, and a reindex
# would leave it stale; training on the first run makes them from the data that is here.
set -euo pipefail
cd "$(dirname "$0")/.."
train=0
deterministic=()
while (( $# )); do
    case "$1" in
        --train) train=1 ;;
        --reproduce) train=1; deterministic=(--deterministic) ;;
        --) shift; break ;;
        *) break ;;
    esac
    shift
done
query="${1:-green tea and breast cancer}"  # not a training query: its votes come from related ones
home="${ESRR_HOME:-artifacts}"
# Train what is missing: the embeddings, and the model (on new embeddings always: a model
# reads the embeddings it was trained on). ESRR_CHECKPOINT names a model to serve: none trained.
embed=$train model=$train
if [[ -z ${ESRR_CHECKPOINT:-} ]]; then
    [[ -s $home/embeddings/CURRENT ]] || embed=1
    [[ -f $home/models/delta-32-lex3-window.pt || -f $home/models/delta-32-lex3.pt ]] || model=1
fi
(( embed )) && model=1
if (( model )); then
    (( train )) && why="retraining as asked" || why="no trained model in $home/models yet (the repository ships none)"
    (( ${#deterministic[@]} )) && recipe="on one thread, deterministic: 7 to 12 min" \
        || recipe="on all $(nproc) cores: 5 to 10 min; --reproduce: one thread, the same vectors every run, 2 min more"
    echo "es-rerank: $why, so this run trains one before it searches (progress bars show each step):"
    echo "  - set up .venv and build the NFCorpus index, where not done yet (about 1 min);"
    (( embed )) && echo "  - word2vec embeddings on all the biomedical text ($recipe);"
    cat <<EOF
  - Delta-32-Lex3 (its window variant, the served default) on the NFCorpus training queries,
    early-stopped on dev NDCG@20: 3 to 10 min;
  then search. From a fresh clone on a 2-core AMD EPYC busy with other work: 15 to 16 min in all, measured;
  about 10 on an idle one (reports/first-run.md). Later runs reuse all of it and take seconds.
EOF
fi
bash scripts/setup.sh model
. .venv/bin/activate
if ! esrr index versions 2>/dev/null | grep -q '\*'; then
    esrr index build
fi
esrr neighbours build --keep-existing  # votes from the NFCorpus train judgments (seconds)
if (( embed )); then
    esrr embeddings train "${deterministic[@]}"
fi
if (( model )); then
    esrr train --variant delta-32-lex3-window  # the served default; `--variant delta-32-lex3` trains the paper's
fi
esrr search -- "$query"  # `--`: a query may start with a dash
