"""How often the sign test calls a difference between a ranker and itself, offline: the real team draft
(``team_draft``) of one ranking with itself, clicks of the informational cascade user over pages of grades drawn as
NFCorpus train pages' (about a quarter of a first page judged, half of those grade 2), and the report's verdict.

    python reports/interleaving-floor/null_rate.py --experiments 400 --impressions 1880 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random

from es_rerank.learning.simulation import CLICK_MODELS
from es_rerank.ranking.interleaving import team_draft, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=400)
    parser.add_argument("--impressions", type=int, default=1880)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    user = CLICK_MODELS["informational"]
    page = list(range(10))
    p_values = []
    for _ in range(options.experiments):
        outcomes = []
        for _ in range(options.impressions):
            grades = [rng.choices((0, 1, 2), (0.75, 0.125, 0.125))[0] for _ in page]
            drafted = team_draft(page, page, 10, rng)  # the same ranking on both sides
            clicked = user.clicks([grades[doc] for doc, _ in drafted], rng)
            outcomes.append(([team for _, team in drafted], [rank + 1 for rank in clicked]))
        p_values.append(verdict(outcomes).p_value)
    below = sum(p < 0.05 for p in p_values)
    print(json.dumps({**vars(options), "below_0.05": below, "rate": round(below / len(p_values), 4)}))


if __name__ == "__main__":
    main()
