"""``esrr learn``: stored events become a click log, judgments with their evidence, and judged-neighbour votes
for the served index; combined with qrels on request; a store that is missing, damaged or clickless is refused."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from es_rerank.learning.click_model import fit_click_model
from es_rerank.learning.clicklog import click_log
from es_rerank.learning.events import Click, Impression, Received, Shown
from es_rerank.learning.judgments import GradeRule, click_query_id, judge, votes_input
from es_rerank.learning.simulation import CLICK_MODELS
from es_rerank.learning.store import open_store
from es_rerank.ranking.neighbours import JudgedNeighbours
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index

DOCS = [Document(f"d{number}", f"title {number}", f"words of document {number}") for number in range(12)]
QUERIES = {"q1": "vitamin d bones", "q2": "green tea cancer", "q3": "statins muscle pain"}
# The documents each query's users find relevant, by grade; the rest of a page is grade 0.
GRADES = {
    "vitamin d bones": {"d3": 2, "d7": 1},
    "green tea cancer": {"d1": 2, "d9": 2},
    "statins muscle pain": {"d5": 1, "d10": 2},
}


def impression(number: int, query: str, ids: list[str]) -> Impression:
    return Impression(
        type="impression",
        impression_id=f"{number:016x}",
        session_id=f"session-{number:010d}",
        query=query,
        ranker="BM25",
        results=[Shown(id=doc, position=rank + 1) for rank, doc in enumerate(ids)],
    )


def click(number: int, doc: str, position: int) -> Click:
    return Click(
        type="click", impression_id=f"{number:016x}", session_id=f"session-{number:010d}", id=doc, position=position
    )


def simulated_events(sessions: int, seed: int = 0, model: str = "perfect") -> list[Received]:
    """Sessions of a cascade user over a fixed page of ten per query, which holds its relevant documents."""
    rng = random.Random(seed)
    pages = {}
    for query in sorted(GRADES):  # the relevant documents and others, ten in all, in a random order
        others = [doc.doc_id for doc in DOCS if doc.doc_id not in GRADES[query]]
        pages[query] = rng.sample(sorted(GRADES[query]) + rng.sample(others, 10 - len(GRADES[query])), 10)
    events = []
    for number in range(sessions):
        query = rng.choice(sorted(GRADES))
        ids = pages[query]
        events.append(Received(impression(number, query, ids), number))
        for rank in CLICK_MODELS[model].clicks([GRADES[query].get(doc, 0) for doc in ids], rng):
            events.append(Received(click(number, ids[rank], rank + 1), number))
    return events


def stored(path: Path | str, events: list[Received]) -> Path | str:
    store = open_store(str(path))
    for start in range(0, len(events), 500):
        store.write(events[start : start + 500])
    store.close()
    return path


def test_clicks_join_the_results_they_were_made_on(tmp_path):
    events = [
        Received(impression(1, "bone loss", ["a", "b", "c"]), 1),
        Received(click(1, "b", 2), 2),
        Received(click(1, "b", 2), 3),  # a double click counts once
        Received(click(2, "a", 1), 4),  # its impression was never stored
        Received(impression(3, "bone loss", ["c", "a"]), 5),
        Received(click(3, "a", 2), 6),
    ]
    store = open_store(str(stored(tmp_path / "events.sqlite3", events)))
    log = click_log(store.learning_rows())
    shown = sorted(
        (log.queries[log.pair_query[p]], log.documents[log.pair_doc[p]], int(r), bool(c))
        for p, r, c in zip(log.pair, log.rank, log.clicked)
    )
    assert shown == [
        ("bone loss", "a", 0, False),
        ("bone loss", "a", 1, True),
        ("bone loss", "b", 1, True),
        ("bone loss", "c", 0, False),
        ("bone loss", "c", 2, False),
    ]
    assert (log.impressions, log.sessions, log.clicks, log.orphan_clicks) == (2, 2, 2, 1)


def test_perfect_users_clicks_grade_the_relevant_documents_and_only_them(tmp_path):
    store = open_store(str(stored(tmp_path / "events.sqlite3", simulated_events(600))))
    log = click_log(store.learning_rows())
    judged = judge(
        log,
        fit_click_model("dcm", log.pair, log.rank, log.clicked, log.impression, len(log.pair_query), max_rank=10),
        GradeRule(min_sessions=5),
    )
    found = {(log.queries[q], log.documents[d]): g for q, d, g in zip(judged.query, judged.doc, judged.grade) if g}
    assert set(found) == {(query, doc) for query, docs in GRADES.items() for doc in docs}
    # The perfect user clicks grade 2 always and grade 1 half the time: their grades come out in that order.
    assert found[("vitamin d bones", "d3")] >= found[("vitamin d bones", "d7")]
    assert judged.sessions.min() >= 5 and (judged.clicks[judged.grade > 0] > 0).all()


def test_a_pair_below_the_minimum_evidence_is_not_judged(tmp_path):
    store = open_store(str(stored(tmp_path / "events.sqlite3", simulated_events(30))))
    log = click_log(store.learning_rows())
    model = fit_click_model("dcm", log.pair, log.rank, log.clicked, log.impression, len(log.pair_query), max_rank=10)
    sessions_per_query = {log.queries[q]: 0 for q in range(len(log.queries))}
    for pair_query in log.pair_query[log.pair[log.rank == 0]]:
        sessions_per_query[log.queries[pair_query]] += 1
    needed = max(sessions_per_query.values())
    judged = judge(log, model, GradeRule(min_sessions=needed))
    assert set(judged.sessions.tolist()) == {needed}
    assert len(judge(log, model, GradeRule(min_sessions=needed + 1)).grade) == 0


def test_click_judgments_combine_with_qrels_by_query_text(tmp_path):
    store = open_store(str(stored(tmp_path / "events.sqlite3", simulated_events(600))))
    log = click_log(store.learning_rows())
    judged = judge(
        log,
        fit_click_model("dcm", log.pair, log.rank, log.clicked, log.impression, len(log.pair_query), max_rank=10),
        GradeRule(min_sessions=5),
    )
    people = {"train-1": "vitamin d bones", "train-2": "coffee"}
    qrels = {"train-1": {"d7": 2, "d0": 1, "d2": 0}, "train-2": {"d4": 1}}
    merged = votes_input(log, judged, None, people, qrels)
    # The click query with a judged query's text joins it; the higher grade wins; the others keep their own ids.
    assert merged.qrels["train-1"] == {"d3": 2, "d7": 2, "d0": 1}
    assert merged.qrels["train-2"] == {"d4": 1}
    assert merged.qrels[click_query_id("green tea cancer")] == {"d1": 2, "d9": 2}
    assert merged.merged_queries == 1 and merged.from_qrels == 3
    alone = votes_input(log, judged, {"d1", "d3", "d5", "d7", "d10"})  # d9 is not in the index
    assert set(alone.queries) == {click_query_id(text) for text in GRADES}
    assert "d9" not in alone.qrels[click_query_id("green tea cancer")]


@pytest.fixture
def served_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    build_embedded_index(DOCS, home / "indexes" / "embedded", version="v1", progress=False)
    return home


def _beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.abstract}) + "\n" for d in DOCS)
    )
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\nq1\td3\t1\nq2\td2\t2\n")
    for split in ("dev", "test"):
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq3\td5\t1\n")
    return root


def test_esrr_learn_writes_votes_for_the_served_corpus_and_reports_the_evidence(esrr, served_home, tmp_path):
    events = stored(served_home / "events" / "events.sqlite3", simulated_events(600, model="navigational"))
    report = tmp_path / "report.json"
    result = esrr("learn", "--min-sessions", "5", "--json-out", str(report))
    assert result.exit_code == 0, result.output
    assert "600 impressions in 600 sessions" in result.output and "restart the gateway" in result.output
    figures = json.loads(report.read_text())
    assert figures["impressions"] == figures["sessions"] == 600 and figures["queries"] == 3
    assert figures["clicks"] == sum(
        1 for event in simulated_events(600, model="navigational") if isinstance(event.event, Click)
    )
    votes = JudgedNeighbours.load(served_home / "models" / "judged-neighbours.json")
    assert votes.corpus is not None and votes.corpus.n_docs == len(DOCS)
    assert {votes.texts[q] for q in votes.query_ids} == set(GRADES)
    relevant = {(votes.texts[q], doc) for q in votes.query_ids for doc in votes.judged[q]}
    assert {("green tea cancer", "d1"), ("vitamin d bones", "d3"), ("statins muscle pain", "d10")} <= relevant
    assert figures["votes"]["from_clicks"] == len(relevant) and figures["votes"]["from_qrels"] == 0
    grades = figures["by_grade"]
    assert sum(row["judgments"] for row in grades.values()) == figures["judged_pairs"]
    assert grades["2"]["sessions_quartiles"][0] >= 5
    rows = (served_home / "models" / "click-judgments.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:4] == ["query_id", "query", "doc", "grade"] and len(rows) == figures["judged_pairs"] + 1
    # Votes answer a query like a judged one with its judged documents.
    assert votes.scores("green tea", ["d1", "d4"]).tolist()[0] > 0
    assert events.is_file()


def test_esrr_learn_with_qrels_adds_the_judgments_people_made(esrr, served_home, tmp_path):
    stored(served_home / "events" / "events.sqlite3", simulated_events(300))
    result = esrr(
        "learn",
        "--with-qrels",
        "--data",
        str(_beir(tmp_path / "beir")),
        "--min-sessions",
        "3",
        "--json-out",
        str(tmp_path / "report.json"),
    )
    assert result.exit_code == 0, result.output
    votes = JudgedNeighbours.load(served_home / "models" / "judged-neighbours.json")
    assert votes.judged["q1"]["d0"] == 1 and votes.judged["q1"]["d3"] == 2  # qrels' d0; clicks raise d3 to 2
    assert votes.judged["q2"]["d2"] == 2 and votes.judged["q2"]["d1"] == 2
    figures = json.loads((tmp_path / "report.json").read_text())["votes"]
    assert figures["from_qrels"] == 3 and figures["click_queries_merged_with_qrels"] == 2  # q3 is not a train query


def test_esrr_learn_without_a_store_says_where_it_looked_and_how_to_make_one(esrr, served_home):
    result = esrr("learn")
    assert result.exit_code == 1
    assert f"no event store at {served_home / 'events' / 'events.sqlite3'}" in result.output
    assert "esrr simulate" in result.output and "ESRR_EVENTS_URL" in result.output
    assert not (served_home / "models" / "judged-neighbours.json").exists()


def test_esrr_learn_refuses_a_damaged_store_and_one_without_clicks(esrr, served_home, tmp_path):
    damaged = tmp_path / "damaged.sqlite3"
    damaged.write_bytes(b"this is no database" * 100)
    result = esrr("learn", "--events", str(damaged))
    assert result.exit_code == 1 and f"cannot open the event store {damaged}" in result.output
    assert "Traceback" not in result.output
    quiet = stored(tmp_path / "quiet.sqlite3", [Received(impression(1, "bone loss", ["d1", "d2"]), 1)])
    result = esrr("learn", "--events", str(quiet))
    assert result.exit_code == 1 and "1 impressions and no clicks" in result.output
    assert not (served_home / "models" / "judged-neighbours.json").exists()


def test_esrr_learn_refuses_events_recorded_over_another_corpus(esrr, served_home, tmp_path):
    other = [Received(impression(n, "green tea", ["x1", "x2"]), n) for n in range(20)]
    other += [Received(click(n, "x1", 1), n) for n in range(20)]
    result = esrr("learn", "--events", str(stored(tmp_path / "other.sqlite3", other)))
    assert result.exit_code == 1 and "recorded over another corpus" in result.output


def test_the_fit_over_many_events_stays_within_a_cpu_budget():
    # 100k impressions of 10 results (1 M shown results): read-side arrays straight into the EM.
    rng = np.random.default_rng(0)
    impressions, pairs = 100_000, 20_000
    pair = rng.integers(0, pairs, impressions * 10)
    rank = np.tile(np.arange(10), impressions)
    clicked = rng.random(len(pair)) < 0.3 / (1 + rank)
    import time

    started = time.process_time()
    fit_click_model("dcm", pair, rank, clicked, np.repeat(np.arange(impressions), 10), pairs, max_rank=10)
    assert time.process_time() - started < 60  # some 5 s here; 10x what 1 M events would need of 5 minutes


def test_esrr_learn_reads_a_postgresql_store_as_it_reads_sqlite(esrr, served_home, tmp_path, postgres_url):
    events = simulated_events(300, model="navigational")
    stored(postgres_url, events)  # open_store takes the URL as it takes a path
    sqlite = stored(tmp_path / "same.sqlite3", events)
    reports = {}
    for name, url in (("postgresql", postgres_url), ("sqlite", str(sqlite))):
        result = esrr("learn", "--events", url, "--json-out", str(tmp_path / f"{name}.json"))
        assert result.exit_code == 0, result.output
        reports[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert "@" not in reports["postgresql"]["events"]  # no user or password in the report
    for key in ("impressions", "sessions", "clicks", "judged_pairs", "by_grade", "examination_by_position"):
        assert reports["postgresql"][key] == reports["sqlite"][key]


def test_esrr_learn_names_a_postgresql_server_it_cannot_reach_without_its_password(esrr, served_home, free_port):
    pytest.importorskip("psycopg", reason="needs psycopg: pip install 'es-rerank[postgres]'")
    result = esrr("learn", "--events", f"postgresql://esrr:secret@127.0.0.1:{free_port()}/events")
    assert result.exit_code == 1 and "cannot open the event store postgresql://127.0.0.1:" in result.output
    assert "secret" not in result.output and "Traceback" not in result.output
