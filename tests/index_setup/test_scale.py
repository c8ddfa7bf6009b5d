"""PubMed scale with small inputs: the generator, baseline + update loads, streaming builds and their memory."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from es_rerank.backends.base import text_hits
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.stats import CorpusStats, Document, build_stats
from es_rerank.stats_writer import StatsWriter
from es_rerank.text import tokenize
from index_setup.embedded_index import build_embedded_index
from index_setup.generate import TextPool, generate_pubmed, heaps_fit
from index_setup.ingest import tokenized_batches
from index_setup.readers import CorpusFormatError, LoadReport, read_corpus

TITLES = (
    "Vitamin D and bone loss in older adults.",
    "Statins and breast cancer risk: a cohort study.",
    "IL-6 signalling in α-synuclein aggregation.",
    "Curcumin for knee osteoarthritis: a trial.",
)
SENTENCES = (
    "We studied 120 patients over 5 years.",
    "Levels rose 3.5-fold (p < 0.05).",
    "Supplementation reduced fractures by 20%.",
    "No effect was seen in women aged 18-65.",
    "The results support further randomized trials.",
    "Serum 25(OH)D was measured at baseline.",
)


@pytest.fixture
def pool() -> TextPool:
    """A tiny recombination pool whose Heaps law mints new words from the first documents on."""
    return TextPool(
        TITLES,
        SENTENCES,
        np.array([len(tokenize(s)) for s in SENTENCES], dtype=np.int32),
        np.array([len(tokenize(t)) for t in TITLES], dtype=np.int32),
        np.array([0, 2, 3, 5], dtype=np.int32),
        heaps_k=4.0,
        heaps_beta=0.6,
        vocabulary=40,
    )


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_generator_is_deterministic_and_writes_pubmed_xml(tmp_path: Path, pool: TextPool) -> None:
    first = generate_pubmed(
        tmp_path / "a",
        120,
        pool,
        seed=3,
        per_file=50,
        update_files=2,
        new_fraction=0.1,
        revise_fraction=0.1,
        delete_fraction=0.05,
        progress=False,
    )
    generate_pubmed(
        tmp_path / "b",
        120,
        pool,
        seed=3,
        per_file=50,
        update_files=2,
        new_fraction=0.1,
        revise_fraction=0.1,
        delete_fraction=0.05,
        progress=False,
    )
    generate_pubmed(tmp_path / "c", 120, pool, seed=4, per_file=50, update_files=2, progress=False)
    assert files_of(tmp_path / "a") == files_of(tmp_path / "b")
    assert files_of(tmp_path / "a")["beir/corpus.jsonl.gz"] != files_of(tmp_path / "c")["beir/corpus.jsonl.gz"]
    names = sorted(files_of(tmp_path / "a"))
    assert [n for n in names if n.endswith(".xml.gz")] == [
        "baseline/pubmed26n0001.xml.gz",
        "baseline/pubmed26n0002.xml.gz",
        "baseline/pubmed26n0003.xml.gz",
        "updatefiles/pubmed26n0004.xml.gz",
        "updatefiles/pubmed26n0005.xml.gz",
    ]
    xml = gzip.decompress(files_of(tmp_path / "a")["baseline/pubmed26n0001.xml.gz"]).decode()
    for element in (
        "<PubmedArticleSet>",
        '<PMID Version="1">1</PMID>',
        "<ArticleTitle>",
        "<Journal>",
        "<Year>",
        "<AuthorList",
        "<MeshHeading>",
        "<PublicationType>",
    ):
        assert element in xml
    assert "<DeleteCitation>" in gzip.decompress(files_of(tmp_path / "a")["updatefiles/pubmed26n0005.xml.gz"]).decode()
    assert first.minted_words > 0 and (first.revised, first.deleted, first.new_in_updates) == (24, 12, 24)


def test_heaps_fit_recovers_a_known_exponent() -> None:
    # Token i is new whenever floor(i^0.5) grows: V(T) ~ T^0.5.
    tokens = [[f"w{int(i**0.5)}" for i in range(1, 40_001)]]
    k, beta, vocabulary = heaps_fit(tokens)
    assert beta == pytest.approx(0.5, abs=0.02) and vocabulary == 200


def write_pubmed_file(path: Path, articles: list[tuple[int, str]], deleted: tuple[int, ...] = ()) -> None:
    records = "".join(
        f"<PubmedArticle><MedlineCitation><PMID>{pmid}</PMID><Article><ArticleTitle>{title}"
        "</ArticleTitle></Article></MedlineCitation></PubmedArticle>"
        for pmid, title in articles
    )
    deletes = f"<DeleteCitation>{''.join(f'<PMID>{p}</PMID>' for p in deleted)}</DeleteCitation>" if deleted else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(f"<PubmedArticleSet>{records}{deletes}</PubmedArticleSet>".encode()))


def test_update_files_replace_and_delete(tmp_path: Path) -> None:
    write_pubmed_file(tmp_path / "baseline" / "pubmed26n0001.xml.gz", [(1, "one"), (2, "two"), (3, "three")])
    write_pubmed_file(tmp_path / "baseline" / "pubmed26n0002.xml.gz", [(5, "five"), (1, "one again")])
    write_pubmed_file(tmp_path / "updatefiles" / "pubmed26n0003.xml.gz", [(2, "two, revised")], deleted=(3, 99))
    write_pubmed_file(
        tmp_path / "updatefiles" / "pubmed26n0004.xml.gz", [(2, "two, revised twice"), (4, "four")], deleted=(5,)
    )
    report = LoadReport()
    documents = list(read_corpus(tmp_path, report=report))
    assert [(d.doc_id, d.title) for d in documents] == [("1", "one"), ("2", "two, revised twice"), ("4", "four")]
    assert (report.added, report.replaced, report.removed, report.skipped) == (2, 1, 2, 1)
    duplicate = report.problems[0]  # a PMID repeated within the baseline: reported with its file and record
    assert duplicate.path.endswith("pubmed26n0002.xml.gz") and duplicate.location == "record 2"
    assert "1 added" not in report.summary() and "2 added, 1 replaced, 2 removed" in report.summary()


def test_a_generated_load_ends_with_the_beir_corpus_and_reindexes_identically(tmp_path: Path, pool: TextPool) -> None:
    generated = generate_pubmed(
        tmp_path / "corpus",
        300,
        pool,
        per_file=100,
        update_files=2,
        new_fraction=0.05,
        revise_fraction=0.05,
        delete_fraction=0.02,
        progress=False,
    )
    report = LoadReport()
    from_xml = list(read_corpus(tmp_path / "corpus", report=report))
    # The BEIR copy holds the text; the XML also the metadata (journal, year, authors, MeSH, types, DOI).
    assert [(d.doc_id, d.title, d.abstract) for d in from_xml] == [
        (d.doc_id, d.title, d.abstract) for d in read_corpus(tmp_path / "corpus" / "beir")
    ]
    assert all(d.journal and d.year and d.authors and d.mesh and d.publication_types and d.doi for d in from_xml)
    assert len(from_xml) == generated.final_docs and report.removed == generated.deleted
    assert report.replaced == generated.revised and report.added == generated.final_docs - generated.revised
    built = [
        build_embedded_index(
            read_corpus(tmp_path / "corpus"), tmp_path / f"index{i}", version="v1", progress=False, workers=0
        )
        for i in (1, 2)
    ]
    stats = [tmp_path / f"index{i}" / "v1" / "stats" for i in (1, 2)]
    assert {p.name for p in stats[0].iterdir()} == {p.name for p in stats[1].iterdir()}
    for path in stats[0].iterdir():
        if path.name != "meta.json":  # meta.json differs in the build id only
            assert path.read_bytes() == (stats[1] / path.name).read_bytes(), path.name
    searches = [
        [(h.doc_id, h.score) for h in text_hits(EmbeddedBackend(b.directory), "vitamin bone", 20)] for b in built
    ]
    assert searches[0] == searches[1] and searches[0]


def test_the_parallel_streaming_build_writes_what_build_stats_computes(tmp_path: Path, pool: TextPool) -> None:
    generate_pubmed(tmp_path / "corpus", 400, pool, update_files=0, progress=False)
    documents = list(read_corpus(tmp_path / "corpus" / "beir"))
    in_memory = build_stats("v", documents)
    writer = StatsWriter(tmp_path / "stats", "v")
    for _, batch in tokenized_batches(documents, workers=2, batch_size=64):  # two processes, seven batches
        writer.add(batch)
    writer.finish()
    streamed = CorpusStats.load(tmp_path / "stats", check_ids=True)
    assert list(streamed.vocab.terms) == list(in_memory.vocab.terms)
    assert list(streamed.doc_ids) == list(in_memory.doc_ids)
    for name in (
        "title_ptr",
        "title_values",
        "abstract_ptr",
        "abstract_values",
        "embedding_of",
        "first_ptr",
        "first_values",
    ):
        assert np.array_equal(getattr(streamed, name), getattr(in_memory, name)), name
    for name, values in in_memory.df.items():
        assert np.array_equal(streamed.df[name], values), name
    assert streamed.row(documents[-1].doc_id) == len(documents) - 1
    assert streamed.vocab.lookup(["vitamin", "zzz"]).tolist() == in_memory.vocab.lookup(["vitamin", "zzz"]).tolist()


def synthetic_stream(n: int) -> Iterator[Document]:
    """``n`` documents over a fixed vocabulary: what grows is the number of documents only."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(500)]
    for i in range(n):
        picks = rng.integers(len(words), size=60)
        yield Document(f"d{i}", " ".join(words[p] for p in picks[:8]), " ".join(words[p] for p in picks[8:]))


def streaming_peak(tmp_path: Path, n: int) -> int:
    """tracemalloc's peak over a streaming statistics build of ``n`` documents (tokenized in this process)."""
    tracemalloc.start()
    try:
        writer = StatsWriter(tmp_path / f"stats-{n}", "v")
        for _, batch in tokenized_batches(synthetic_stream(n), workers=0, batch_size=500):
            writer.add(batch)
        writer.finish()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_streaming_memory_does_not_grow_with_the_number_of_documents(tmp_path: Path) -> None:
    small, large = streaming_peak(tmp_path, 2_000), streaming_peak(tmp_path, 16_000)
    # 8x the documents: a build that kept per-document objects would peak several times higher.
    assert large < 1.3 * small, (small, large)
    assert CorpusStats.load(tmp_path / "stats-16000").n_docs == 16_000


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than the parser allows"),
        ('{"_id": "x", "n": ' + "9" * 5000 + "}", "a number the parser refuses"),
        ('{"_id": "nul\\u0000id", "title": "t"}', "contains a control or format character"),
        ('{"_id": "d1", "title": "again"}', "document id 'd1' was read before in this load"),
    ],
)
def test_a_bad_line_is_skipped_with_its_file_and_line_unless_strict(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "corpus.jsonl"
    good = [json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": "text"}) for i in (1, 2)]
    path.write_text("\n".join([good[0], line, good[1]]) + "\n", encoding="utf-8")
    report = LoadReport()
    assert [d.doc_id for d in read_corpus(path, report=report)] == ["d1", "d2"]
    assert report.skipped == 1 and report.problems[0].location == "line 2"
    assert problem in report.problems[0].message and report.problems[0].path == str(path)
    with pytest.raises(CorpusFormatError, match=f"{path.name}, line 2: "):
        list(read_corpus(path, strict=True))
