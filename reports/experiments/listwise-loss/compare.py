"""Paired t-test of softmax-trained against hinge-trained Delta-32-Lex3, per query, from eval's run files.

    ESRR_HOME=artifacts python reports/experiments/listwise-loss/compare.py SPLIT

Reads the TREC runs that ``esrr eval --split SPLIT`` wrote for reports/nfcorpus-softmax
(``$ESRR_HOME/runs/SPLIT``) and prints NDCG@20 (2^rel - 1) of each pair of rows and the
p-value of their paired t-test over the split's queries.
"""

from __future__ import annotations

import sys

import ir_measures
import numpy as np
from scipy import stats as scipy_stats

from training.api import PAPER_NDCG20, open_workspace, per_query

PAIRS = [
    (f"Delta-32-Lex3_softmax_seed_{seed}_", hinge)
    for seed, hinge in ((13, "Delta-32-Lex3"), (14, "Delta-32-Lex3_seed_14_"), (15, "Delta-32-Lex3_seed_15_"))
]
PAIRS.append(("Delta-32-Lex3_softmax_3_seeds_averaged", "Delta-32-Lex3_3_seeds_averaged"))


def main(split: str) -> None:
    work = open_workspace(None)
    qrels = work.nfcorpus.qrels(split)
    runs = work.settings.home / "runs" / split
    for softmax, hinge in PAIRS:
        a, b = (
            per_query(PAPER_NDCG20, qrels, ir_measures.read_trec_run(str(runs / f"{tag}.run")))
            for tag in (softmax, hinge)
        )
        x, y = np.array([a[q] for q in qrels]), np.array([b[q] for q in qrels])
        print(
            f"{softmax} {x.mean():.4f}  {hinge} {y.mean():.4f}  "
            f"difference {x.mean() - y.mean():+.4f}  p={scipy_stats.ttest_rel(x, y).pvalue:.2g}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
