#!/usr/bin/env bash
# usage (after the six `esrr train --loss softmax --seed S --suffix=-softmax-seedS` runs, S = 13..18):
#   bash reports/experiments/seed-ensembles/evaluate.sh dev|test
set -euo pipefail
m=artifacts/models/delta-32-lex3-softmax-seed
args=()
for s in 13 14 15 16 17 18; do args+=(--extra "softmax seed $s=${m}$s.pt"); done
members="${m}13.pt"
for k in 2 3 4 5 6; do s=$((12 + k)); members="$members,${m}$s.pt"; args+=(--ensemble "softmax $k seeds=$members"); done
ESRR_HOME=artifacts .venv/bin/esrr eval --split "$1" --out "reports/experiments/seed-ensembles/$1" "${args[@]}"
