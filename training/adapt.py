"""``esrr train --adapt``: the served model fine-tuned on a new collection, with no judgments.

The collection's own records teach it: each titled record's title is a query for that record
(section "pseudo-queries" of docs/quality.md), over a copy of the collection with every title
blanked, since a record's own title in its text would answer its query by string match. The
model's other inputs are what it is served: the BM25 top-500 of that copy's embedded index,
the Lex features of the served model's record (its window scale included), the first 50
embedded tokens; the negatives are drawn from each query's BM25 window. Test pseudo-queries
are the same draw as ``esrr shift``'s pseudo-query conditions, and no record of theirs
trains or chooses.

Pure functions name the copy and the new checkpoint; ``write_pseudo_collection`` writes the
copy as a BEIR folder that ``esrr eval --data`` reads like any judged collection.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from es_rerank.stats import Document
from training.shift import PSEUDO_QUERIES, Condition, pseudo_queries, write_condition
from training.train import TrainConfig

ADAPT_DEV_QUERIES = 200  # dev titles that choose the epoch; 200 known items give a stable NDCG@20
ADAPT_TRAIN_QUERIES = 1500  # titles trained on: a few minutes on 2 cores per epoch
ADAPTED_INFIX = "-adapted-"
# Fine-tuning, not training: a fifth of the recipe's learning rate, so the served model's weights move
# little; few epochs, stopped at the first that does not improve dev.
ADAPT_TRAINING = TrainConfig(max_epochs=3, patience=1, learning_rate=0.01)
MIN_PSEUDO_QUERIES = 20  # fewer titled records than this train nothing worth a checkpoint


class AdaptationError(ValueError):
    """A collection cannot be adapted to (no titles to ask with); the message names the cause and the fix."""


@dataclass(frozen=True)
class AdaptationPlan:
    """Where the pseudo-query collection and the adapted checkpoint go, and how many queries of each split."""

    name: str
    collection_dir: Path
    checkpoint: Path
    train_queries: int
    dev_queries: int
    test_queries: int


def collection_slug(data: Path) -> str:
    """A short file-name-safe name of the collection at ``data`` (its folder's, or its file's stem)."""
    path = Path(data).expanduser().resolve()
    name = path.name if path.is_dir() else path.name.split(".")[0]
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "collection"


def adapted_checkpoint_path(served: Path, slug: str, suffix: str = "") -> Path:
    """The new checkpoint: beside the served one, named after it and the collection, never the served file."""
    return served.with_name(f"{served.stem}{ADAPTED_INFIX}{slug}{suffix}.pt")


def plan_adaptation(
    data: Path,
    served: Path,
    home: Path,
    train_queries: int = ADAPT_TRAIN_QUERIES,
    dev_queries: int = ADAPT_DEV_QUERIES,
    test_queries: int = PSEUDO_QUERIES,
    suffix: str = "",
) -> AdaptationPlan:
    """Names and sizes of one adaptation of ``served`` to the collection at ``data``."""
    slug = collection_slug(data)
    checkpoint = adapted_checkpoint_path(served, slug, suffix)
    if checkpoint.resolve() == served.resolve():  # cannot happen by the name; said rather than overwritten
        raise AdaptationError(f"the adapted checkpoint would replace the served {served}; pick another --suffix")
    return AdaptationPlan(slug, home / "adapt" / f"{slug}-pseudo", checkpoint, train_queries, dev_queries, test_queries)


def pseudo_collection(plan: AdaptationPlan, documents: Sequence[Document], seed: int = 13) -> Condition:
    """The titles-as-queries collection of ``plan``: test, dev and train pseudo-queries over blank-titled records.

    A collection with fewer titled records than ``plan`` asks for holds out a fifth of them for the test and
    a tenth for dev, and trains on the rest.
    """
    titled = sum(1 for d in documents if d.title.strip() and d.abstract.strip())
    test, dev = min(plan.test_queries, titled // 5), min(plan.dev_queries, titled // 10)
    train = min(plan.train_queries, titled - test - dev)
    if train < MIN_PSEUDO_QUERIES or dev < 1:
        raise AdaptationError(
            f"only {titled} of the {len(documents)} records have both a title and an abstract; adaptation asks "
            f"with titles (at least {MIN_PSEUDO_QUERIES} to train on beside a tenth to choose the epoch and a "
            "fifth to test), so there is nothing to learn from here: keep the served model, and check it with "
            "`esrr eval --data`"
        )
    return pseudo_queries(f"{plan.name}-pseudo", list(documents), n_queries=test, seed=seed, n_dev=dev, n_train=train)


def write_pseudo_collection(plan: AdaptationPlan, condition: Condition) -> Path:
    """Write ``condition`` as the BEIR folder ``plan.collection_dir`` (its index is keyed by the files)."""
    condition = replace(condition, name=plan.collection_dir.name)
    return write_condition(condition, plan.collection_dir.parent)
