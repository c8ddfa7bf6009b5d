"""Shifted copies of NFCorpus (`esrr shift`): long queries, blank titles, topics held out whole."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from es_rerank.cli import main
from es_rerank.stats import Document
from index_setup.readers import read_beir_corpus, read_qrels, read_queries
from training.shift import (
    assign_topics,
    no_titles,
    pseudo_queries,
    relevant,
    shared_relevant_share,
    topic_disjoint,
    topic_graph_communities,
    vid_desc,
)

DOCS = [Document(f"d{i}", f"title {i}", f"abstract {i}") for i in range(12)]


def _qrels() -> dict[str, dict[str, dict[str, int]]]:
    """Three topics of documents (d0-d3, d4-d7, d8-d11), four queries each, over the three splits."""
    split_of = {0: "train", 1: "train", 2: "dev", 3: "test"}
    qrels: dict[str, dict[str, dict[str, int]]] = {"train": {}, "dev": {}, "test": {}}
    for topic in range(3):
        for j in range(4):
            docs = {f"d{4 * topic + i}": 2 if i == j else 1 for i in range(4)}
            qrels[split_of[j]][f"t{topic}q{j}"] = docs
    return qrels


def test_vid_desc_keeps_the_judgments_of_the_queries_it_replaces():
    qrels = _qrels()
    condition = vid_desc(DOCS, {"dev": {"t0q2": "a long description", "unjudged": "x"}, "test": {}}, qrels)
    assert condition.queries == {"t0q2": "a long description"}
    assert condition.qrels["dev"] == {"t0q2": qrels["dev"]["t0q2"]} and condition.qrels["test"] == {}
    assert condition.documents == DOCS


def test_no_titles_blanks_every_title_and_nothing_else():
    condition = no_titles(DOCS, {"q": "text"}, _qrels())
    assert [d.title for d in condition.documents] == [""] * len(DOCS)
    assert [d.abstract for d in condition.documents] == [d.abstract for d in DOCS]
    assert condition.qrels == _qrels()


def test_topics_are_the_groups_of_queries_that_share_relevant_documents():
    judged = relevant({q: docs for split in _qrels().values() for q, docs in split.items()})
    communities = topic_graph_communities(judged, seed=13)
    assert sorted(communities) == [[f"t{t}q{j}" for j in range(4)] for t in range(3)]
    splits = assign_topics(communities, seed=13, share=0.25)
    assert sorted(len(q) for q in splits.values()) == [4, 4, 4]
    for queries in splits.values():  # a topic is never cut
        assert len({q[:2] for q in queries}) == 1


def test_a_topic_disjoint_split_shares_no_relevant_document_across_splits_when_topics_do_not():
    queries = {q: q for split in _qrels().values() for q in split}
    condition = topic_disjoint(DOCS, queries, _qrels(), seed=13)
    mine = {s: relevant(condition.qrels[s]) for s in ("train", "dev", "test")}
    assert sum(len(q) for q in mine.values()) == 12
    assert shared_relevant_share(mine["test"], mine["train"]) == 0.0
    described = condition.description["share of a test query's relevant documents judged relevant by some train query"]
    assert described == {"this split": 0.0, "the original split": 1.0}


def test_shift_writes_beir_folders_that_eval_and_train_read(tmp_path: Path):
    root = tmp_path / "nfcorpus"
    (root / "qrels").mkdir(parents=True)
    (root / "original" / "queries").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.abstract}) + "\n" for d in DOCS),
        encoding="utf-8",
    )
    qrels = _qrels()
    texts = {q: f"query {q}" for split in qrels.values() for q in split}
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in texts.items()), encoding="utf-8"
    )
    for split, judged in qrels.items():
        rows = [f"{q}\t{d}\t{g}" for q, docs in judged.items() for d, g in docs.items()]
        (root / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n", encoding="utf-8"
        )
        descriptions = "".join(f"{q}\ta much longer description of {q}\n" for q in judged)
        (root / "original" / "queries" / f"{split}.vid-desc.queries").write_text(descriptions, encoding="utf-8")
    out = tmp_path / "shifted"
    result = CliRunner().invoke(
        main, ["shift", "--data", str(root), "--out", str(out)], env={"ESRR_HOME": str(tmp_path / "home")}
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["no-titles", "topic-disjoint", "vid-desc"]
    for name in ("no-titles", "topic-disjoint", "vid-desc"):
        folder = out / name
        assert json.loads((folder / "condition.json").read_text(encoding="utf-8"))["condition"] == name
        assert len(list(read_beir_corpus(folder / "corpus.jsonl.gz"))) == 12
        for split in ("train", "dev", "test"):
            assert set(read_qrels(folder / "qrels" / f"{split}.tsv")) <= set(read_queries(folder / "queries.jsonl"))
    assert read_queries(out / "vid-desc" / "queries.jsonl")["t0q3"] == "a much longer description of t0q3"
    assert {d.title for d in read_beir_corpus(out / "no-titles" / "corpus.jsonl.gz")} == {""}


def test_pseudo_queries_are_titles_of_records_whose_titles_are_then_blanked():
    documents = [*DOCS, Document("untitled", "", "an abstract"), Document("empty", "A title", "")]
    condition = pseudo_queries("x-pseudo", documents, n_queries=5, seed=13)
    assert len(condition.queries) == 5 and condition.qrels["train"] == condition.qrels["dev"] == {}
    by_id = {d.doc_id: d for d in DOCS}
    for query_id, judged in condition.qrels["test"].items():
        (doc_id,) = judged
        assert judged == {doc_id: 1} and condition.queries[query_id] == by_id[doc_id].title
    assert {d.title for d in condition.documents} == {""} and "empty" not in {d.doc_id for d in condition.documents}
    again = pseudo_queries("x-pseudo", list(reversed(documents)), n_queries=5, seed=13)
    assert again.queries == condition.queries  # the draw does not depend on the reading order
