#!/usr/bin/env bash
# A served home of 1,000,000 generated PubMed-like documents for profiling the gateway at scale (issue 33).
#
#   reports/profile/one-million/setup.sh            (from the checkout's root; rerun: every done step is skipped)
#
# The corpus is the one `esrr bench scale --sizes 1000000` builds: `esrr generate pubmed`, seed 0, 2 update
# files, indexed from its BEIR JSONL (the corpus after the updates) as scale.py serves it at 1M. Then a
# random-weight Delta-32-Lex3-window on random embeddings (reports/profile/random_model.py: the gateway computes
# and sends the same for any weights) and the judged neighbours (see below).
#
# Environment: ONEM_HOME (default /tmp/onem-home), ONEM_CORPUS (default /tmp/onem-corpus-1000000; a corpus
# that `esrr bench scale --work DIR` generated, DIR/corpus-1000000, is the same files), ONEM_DOCS (default
# 1000000: a smaller size builds a home of that size the same way; `nfcorpus` builds NFCorpus itself, the 3.6k
# documents run.sh's figures compare with, judged neighbours included), PYTHON (default: the project's venv, or
# `python`). CPU: generating and indexing 1M documents take several minutes of every core; disk: about 3 GB.
set -euo pipefail
cd "$(dirname "$0")/../../.."
docs=${ONEM_DOCS:-1000000}
home=${ONEM_HOME:-/tmp/onem-home}
corpus=${ONEM_CORPUS:-/tmp/onem-corpus-$docs}
python=${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python)}
export ESRR_HOME=$home PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
esrr() { $python -c "from es_rerank.cli import main; main()" "$@"; }
stamp() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

if [[ $docs == nfcorpus ]]; then
    corpus=${ONEM_CORPUS:-$($python -c "from index_setup.nfcorpus import find_nfcorpus; print(find_nfcorpus(None))")}
    data=$corpus
elif [[ ! -f $corpus/generation.json ]]; then
    stamp "generating $docs documents into $corpus"
    rm -rf "$corpus"
    esrr generate pubmed --docs "$docs" --out "$corpus"
fi
data=${data:-$corpus/beir/corpus.jsonl.gz}
if [[ ! -f $home/indexes/embedded/CURRENT ]]; then
    stamp "indexing $data into $home"
    esrr index build --data "$data" --version v1
fi
stamp "index: $(esrr index stats | head -1)"
# The judged neighbours vote for NFCorpus documents (judged in its train split); a generated corpus holds none
# of them, so `esrr neighbours build` refuses it (and the gateway would not apply a file built for another
# corpus). Tried, and the refusal kept in the log: the served search then has no votes stage.
if [[ ! -f $home/models/judged-neighbours.json ]]; then
    stamp "judged neighbours"
    esrr neighbours build || stamp "no judged neighbours for this corpus (see above); the searches run without votes"
fi
if [[ ! -f $home/models/delta-32-lex3-window.pt ]]; then
    stamp "random-weight model"
    # vectors for the 100,000 most frequent forms, as scale.py's model (all of 1M's would be 1.4M, 1.7 GB)
    $python reports/profile/random_model.py --words 100000
fi
stamp "done: $home ($(du -sh "$home" | cut -f1)), corpus $corpus ($(du -sh "$corpus" | cut -f1))"
