"""Shifted copies of NFCorpus: collections the served model was not trained for, built from data we have.

Each condition is a BEIR-layout folder (``corpus.jsonl.gz``, ``queries.jsonl``,
``qrels/{train,dev,test}.tsv`` with the graded labels, ``condition.json`` saying how it was
made), so ``esrr eval --data``, ``esrr train --data`` and ``esrr neighbours build --data``
read it like any collection:

- ``vid-desc``: the same documents and judgments, the queries replaced by the NutritionFacts
  video descriptions (``original/queries/*.vid-desc.queries``): sentence-long, 20-40 words,
  where the model reads 7 (102 dev and 102 test queries keep their judgments).
- ``no-titles``: the standard queries over the documents with every title blanked, so both
  title features of Lex3 are 0 and the model reads the abstract's first 50 words.
- ``topic-disjoint``: the standard queries and documents, split anew so that whole topics are
  held out: queries that judge the same documents relevant form a graph (an edge per shared
  relevant document, weighted 1 / the number of queries judging it, so that hub documents cited
  by hundreds of pages do not tie everything together), Louvain communities of that graph are
  the topics (networkx, a fixed seed), and whole topics go to test and dev (10% of the queries
  each), the rest to train. A model and votes for this condition are trained on its train split.

And a judgment-free check on biomedical text the model never ranked (``pseudo_queries``):
``ohsumed-pseudo`` (7,400 MEDLINE records of 1991) and ``bc5cdr-pseudo`` (1,500 PubMed
records), each with its titles blanked and 300 of its titles, drawn with a seed, as queries
whose one relevant document is the record they came from (a test split only).

Pure functions build the records; ``write_condition`` writes them.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from es_rerank.ranking.neighbours import relevant_judgments
from es_rerank.stats import Document

Qrels = dict[str, dict[str, int]]
SPLITS = ("train", "dev", "test")
CONDITIONS = ("vid-desc", "no-titles", "topic-disjoint")
PSEUDO_CONDITIONS = {"ohsumed-pseudo": "ohsumed", "bc5cdr-pseudo": "bc5cdr"}  # condition -> text source
PSEUDO_QUERIES = 300
TOPIC_RESOLUTION = 2.0  # Louvain resolution: topics of at most ~8% of the queries, so whole ones fit a 10% split
HELD_OUT_SHARE = 0.10  # of the judged queries, for dev and for test


@dataclass(frozen=True)
class Condition:
    """One shifted collection: its documents, queries and graded judgments per split, and how it was made."""

    name: str
    documents: list[Document]
    queries: dict[str, str]
    qrels: dict[str, Qrels]  # split -> query id -> {doc id: grade}
    description: dict[str, object]


def relevant(qrels: Mapping[str, Mapping[str, int]]) -> dict[str, set[str]]:
    """Query id -> the documents it judges relevant (``relevant_judgments``); queries without any are left out."""
    return {q: set(docs) for q, docs in relevant_judgments(qrels).items()}


def vid_desc(
    documents: list[Document], descriptions: Mapping[str, Mapping[str, str]], qrels: Mapping[str, Qrels]
) -> Condition:
    """The video-description queries of each split with that split's judgments of the same query ids."""
    queries: dict[str, str] = {}
    kept: dict[str, Qrels] = {}
    for split in SPLITS:
        texts = descriptions.get(split, {})
        kept[split] = {q: dict(docs) for q, docs in qrels[split].items() if q in texts}
        queries.update({q: texts[q] for q in kept[split]})
    counts = {split: len(kept[split]) for split in SPLITS}
    return Condition(
        "vid-desc",
        documents,
        queries,
        kept,
        {
            "queries": "original/queries/{split}.vid-desc.queries: NutritionFacts video descriptions",
            "queries per split": counts,
            "documents": "unchanged",
            "judgments": "unchanged, for these query ids",
        },
    )


def no_titles(documents: list[Document], queries: Mapping[str, str], qrels: Mapping[str, Qrels]) -> Condition:
    """Every document's title blanked; queries and judgments unchanged."""
    blanked = [Document(d.doc_id, "", d.abstract) for d in documents]
    return Condition(
        "no-titles",
        blanked,
        dict(queries),
        {s: dict(qrels[s]) for s in SPLITS},
        {"documents": "titles blanked (empty), abstracts unchanged", "queries": "unchanged", "judgments": "unchanged"},
    )


def topic_graph_communities(
    judged: Mapping[str, set[str]], seed: int, resolution: float = TOPIC_RESOLUTION
) -> list[list[str]]:
    """Topics: Louvain communities of the queries, linked by the relevant documents they share (sorted ids)."""
    import networkx as nx

    judging: dict[str, list[str]] = defaultdict(list)
    for query_id in sorted(judged):
        for doc_id in judged[query_id]:
            judging[doc_id].append(query_id)
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(sorted(judged))
    for doc_id in sorted(judging):
        queries = judging[doc_id]
        weight = 1.0 / len(queries)  # a hub document links much and says little about the topic
        for a, b in itertools.combinations(queries, 2):
            previous = graph.get_edge_data(a, b, {"weight": 0.0})["weight"]
            graph.add_edge(a, b, weight=previous + weight)
    communities = nx.community.louvain_communities(graph, weight="weight", resolution=resolution, seed=seed)
    return sorted((sorted(c) for c in communities), key=lambda c: c[0])


def assign_topics(communities: list[list[str]], seed: int, share: float = HELD_OUT_SHARE) -> dict[str, list[str]]:
    """Whole topics, in a seeded random order, to test and then dev until each holds ``share`` of the queries."""
    order = list(communities)
    random.Random(seed).shuffle(order)
    total = sum(len(c) for c in order)
    splits: dict[str, list[str]] = {"test": [], "dev": [], "train": []}
    for community in order:
        target = next((s for s in ("test", "dev") if len(splits[s]) < share * total), "train")
        splits[target].extend(community)
    return {s: sorted(q) for s, q in splits.items()}


def shared_relevant_share(held_out: Mapping[str, set[str]], train: Mapping[str, set[str]]) -> float:
    """Mean, over held-out queries, of the share of their relevant documents some train query judges relevant."""
    seen = set().union(*train.values()) if train else set()
    if not held_out:
        return 0.0
    return sum(len(docs & seen) / len(docs) for docs in held_out.values()) / len(held_out)


def topic_disjoint(
    documents: list[Document], queries: Mapping[str, str], qrels: Mapping[str, Qrels], seed: int = 13
) -> Condition:
    """A new train/dev/test split of every judged query that holds whole topics out (module docstring)."""
    graded: Qrels = {}
    for split in SPLITS:
        graded.update({q: dict(docs) for q, docs in qrels[split].items() if q in queries})
    judged = relevant(graded)
    communities = topic_graph_communities(judged, seed)
    splits = assign_topics(communities, seed)
    new_qrels = {s: {q: graded[q] for q in splits[s]} for s in SPLITS}
    original = {s: relevant({q: d for q, d in qrels[s].items() if q in queries}) for s in SPLITS}
    mine = {s: {q: judged[q] for q in splits[s]} for s in SPLITS}
    return Condition(
        "topic-disjoint",
        documents,
        {q: queries[q] for q in graded},
        new_qrels,
        {
            "split": f"Louvain communities (networkx, resolution {TOPIC_RESOLUTION}, seed {seed}) of the judged "
            "queries linked by shared relevant documents (weight 1/number of queries judging each); whole "
            f"communities to test, then dev, until each holds {HELD_OUT_SHARE:.0%} of the queries",
            "communities": len(communities),
            "largest community": max(len(c) for c in communities),
            "queries per split": {s: len(splits[s]) for s in SPLITS},
            "share of a test query's relevant documents judged relevant by some train query": {
                "this split": round(shared_relevant_share(mine["test"], mine["train"]), 4),
                "the original split": round(shared_relevant_share(original["test"], original["train"]), 4),
            },
            "documents": "unchanged",
            "judgments": "unchanged (train: the graded original labels)",
        },
    )


def pseudo_queries(
    name: str,
    documents: list[Document],
    n_queries: int = PSEUDO_QUERIES,
    seed: int = 13,
    n_dev: int = 0,
    n_train: int = 0,
) -> Condition:
    """Titles as queries for their own abstracts, over the documents with every title blanked.

    The test queries are the same draw whatever ``n_dev`` and ``n_train`` ask (``esrr shift``'s
    test split is ``esrr train --adapt``'s); dev and train queries come from the other records.
    """
    usable = sorted(
        {d.doc_id: d for d in documents if d.title.strip() and d.abstract.strip()}.values(), key=lambda d: d.doc_id
    )
    chosen = random.Random(seed).sample(usable, min(n_queries, len(usable)))
    taken = {d.doc_id for d in chosen}
    rest = [d for d in usable if d.doc_id not in taken]
    random.Random(seed + 1).shuffle(rest)
    drawn = {"test": chosen, "dev": rest[:n_dev], "train": rest[n_dev : n_dev + n_train]}
    kept = {d.doc_id: Document(d.doc_id, "", d.abstract) for d in documents if d.abstract.strip()}
    queries = {f"pq-{d.doc_id}": d.title for docs in drawn.values() for d in docs}
    qrels = {split: {f"pq-{d.doc_id}": {d.doc_id: 1} for d in drawn[split]} for split in SPLITS}
    counts = ", ".join(f"{len(drawn[s])} {s}" for s in SPLITS if drawn[s])
    return Condition(
        name,
        list(kept.values()),
        queries,
        qrels,
        {
            "documents": f"{len(kept)} records with an abstract, titles blanked",
            "queries": f"titles drawn with seed {seed} ({counts}), each judged relevant to its own record only; "
            f"test first, then dev and train from the other titled records",
            "judgments": "one relevant document a query (a known-item search)",
        },
    )


def write_condition(condition: Condition, directory: Path) -> Path:
    """Write ``condition`` as a BEIR folder under ``directory/<name>`` (replacing one written before)."""
    target = directory / condition.name
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = b"".join(
        (json.dumps({"_id": d.doc_id, "title": d.title, "text": d.abstract}) + "\n").encode()
        for d in condition.documents
    )
    # mtime 0: the same documents give the same bytes, so a file already there is left alone, and the
    # index that `esrr eval --data` keys by the corpus file's size and age is reused, not rebuilt.
    _write_if_changed(target / "corpus.jsonl.gz", gzip.compress(corpus, mtime=0))
    _write_lines(target / "queries.jsonl", (json.dumps({"_id": q, "text": t}) for q, t in condition.queries.items()))
    for split in SPLITS:
        rows = (
            f"{q}\t{d}\t{g}"
            for q in sorted(condition.qrels[split])
            for d, g in sorted(condition.qrels[split][q].items())
        )
        _write_lines(target / "qrels" / f"{split}.tsv", itertools.chain(["query-id\tcorpus-id\tscore"], rows))
    (target / "condition.json").write_text(
        json.dumps({"condition": condition.name, **condition.description}, indent=2) + "\n", encoding="utf-8"
    )
    return target


def _write_if_changed(path: Path, data: bytes) -> None:
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for line in lines:
            out.write(line + "\n")
