#!/usr/bin/env bash
# The one-path check: esrr eval on NFCorpus test and every query's BM25 top-500, before (BEFORE, a checkout of
# 76791bc) and after (AFTER, this checkout), on one home with an NFCorpus index and a random-weight model.
#   BEFORE=/path/to/76791bc AFTER=$PWD HOME_DIR=/tmp/one-path bash reports/experiments/one-path/run.sh
set -euo pipefail
: "${BEFORE:?a checkout of 76791bc}" "${AFTER:?this checkout}" "${HOME_DIR:?a folder for the home and results}"
PY=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
export ESRR_HOME=$HOME_DIR/home ESRR_BACKEND=embedded ESRR_TORCH_THREADS=1
esrr() { "$PY" -c 'from es_rerank.cli import main; main()' "$@"; }
if [ ! -f "$ESRR_HOME/models/delta-32-lex3.pt" ]; then
  PYTHONPATH=$AFTER esrr index build
  # Random embeddings of the 100,000 most frequent terms and a random-weight Delta-32-Lex3 (no training): the
  # served rows then run every stage (model, guard, feedback) on this machine in minutes.
  PYTHONPATH=$AFTER "$PY" -c "
from pathlib import Path
from es_rerank.backends.embedded import EmbeddedBackend
from benchmarks.scale import _random_model
home = Path('$ESRR_HOME')
backend = EmbeddedBackend.open_current(home / 'indexes' / 'embedded')
_random_model(home, backend.version, backend.stats, words=100_000)"
fi
for side in before after; do
  checkout=$BEFORE; [ $side = after ] && checkout=$AFTER
  (cd "$checkout" && PYTHONPATH=$checkout esrr eval --split test --out "$HOME_DIR/$side")
  rm -rf "$HOME_DIR/$side-runs" && cp -r "$ESRR_HOME/runs/test" "$HOME_DIR/$side-runs"
  PYTHONPATH=$checkout "$PY" "$HERE/first_stage.py" dump "$HOME_DIR/first-stage-$side.json"
done
diff <(tail -n +3 "$HOME_DIR/before/table.md") <(tail -n +3 "$HOME_DIR/after/table.md") && echo "tables: the same"
diff -r "$HOME_DIR/before-runs" "$HOME_DIR/after-runs" && echo "run files: the same, byte for byte"
"$PY" "$HERE/first_stage.py" compare "$HOME_DIR/first-stage-before.json" "$HOME_DIR/first-stage-after.json"
PYTHONPATH=$AFTER "$PY" "$HERE/first_stage.py" orders test
