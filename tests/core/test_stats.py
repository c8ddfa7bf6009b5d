"""Term statistics on the tiny corpus of conftest.py (a, b, c)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import mmap
from pathlib import Path

import numpy as np
import pytest

from es_rerank.stats import (
    FIELDS,
    FIRST_TOKENS,
    CorpusStats,
    DocTerms,
    Document,
    StatsError,
    Vocabulary,
    build_stats,
    iter_doc_terms,
)
from es_rerank.text import NUMBER_CLASSES, YEAR_19XX, embedding_tokens, tokenize


def df(stats: CorpusStats, term: str) -> dict[str, int]:
    term_id = stats.vocab.ids[term]
    return {name: int(stats.df[name][term_id]) for name in FIELDS}


def words(stats: CorpusStats, ids: np.ndarray) -> list[str]:
    return [stats.vocab.terms[i] for i in ids]


def test_document_frequencies_per_field(tiny_stats: CorpusStats) -> None:
    # a: "vitamin d deficiency" / "vitamin d deficiency causes bone loss"
    # b: "bone health" / "calcium and vitamin k support bone health"
    # c: "breast cancer" / ""
    assert df(tiny_stats, "vitamin") == {"title": 1, "abstract": 2, "text": 2}  # a twice counts once
    assert df(tiny_stats, "bone") == {"title": 1, "abstract": 2, "text": 2}
    assert df(tiny_stats, "d") == {"title": 1, "abstract": 1, "text": 1}
    assert df(tiny_stats, "calcium") == {"title": 0, "abstract": 1, "text": 1}
    assert df(tiny_stats, "breast") == {"title": 1, "abstract": 0, "text": 1}
    # the number classes are in every vocabulary but in no document here
    assert all(df(tiny_stats, cls) == {"title": 0, "abstract": 0, "text": 0} for cls in NUMBER_CLASSES)


def test_average_lengths(tiny_stats: CorpusStats) -> None:
    assert tiny_stats.n_docs == 3
    assert tiny_stats.avg_length("title") == pytest.approx((3 + 2 + 2) / 3)
    assert tiny_stats.avg_length("abstract") == pytest.approx((6 + 7 + 0) / 3)
    assert tiny_stats.avg_length("text") == pytest.approx((9 + 9 + 2) / 3)
    with pytest.raises(StatsError, match="unknown field 'body'"):
        tiny_stats.avg_length("body")


def test_idf_is_lucene_bm25_idf(tiny_stats: CorpusStats) -> None:
    ids = tiny_stats.vocab.lookup(["vitamin", "health", "zebrafish"])
    # N = 3: log(1 + (N - df + 0.5) / (df + 0.5)) with text df 2, 1 and 0 (unknown)
    expected = [math.log(1 + 1.5 / 2.5), math.log(1 + 2.5 / 1.5), math.log(1 + 3.5 / 0.5)]
    assert tiny_stats.idf(ids, "text") == pytest.approx(expected)


def test_doc_terms_by_row(tiny_stats: CorpusStats) -> None:
    row = tiny_stats.row("b")
    assert row == 1
    terms = tiny_stats.doc_terms(row)
    assert words(tiny_stats, terms.title_ids) == ["bone", "health"]
    assert words(tiny_stats, terms.abstract_ids) == tokenize("Calcium and vitamin K support bone health.")
    assert words(tiny_stats, terms.first_ids) == ["bone", "health"] + tokenize(
        "Calcium and vitamin K support bone health."
    )
    empty = tiny_stats.doc_terms(tiny_stats.row("c"))
    assert len(empty.abstract_ids) == 0 and words(tiny_stats, empty.first_ids) == ["breast", "cancer"]


def test_unknown_doc_id(tiny_stats: CorpusStats) -> None:
    with pytest.raises(StatsError, match="'zzz' is not in statistics version 'tiny'"):
        tiny_stats.row("zzz")


def test_first_tokens_are_truncated_embedding_tokens() -> None:
    title = "Trial of 1998"
    abstract = " ".join(f"w{i}" for i in range(60))
    stats = build_stats("v", [Document("x", title, abstract)])
    terms = stats.doc_terms(0)
    lexical = tokenize(title) + tokenize(abstract)
    assert len(lexical) == 63 and len(terms.first_ids) == FIRST_TOKENS == 50
    assert words(stats, terms.first_ids) == embedding_tokens(lexical[:50])
    assert words(stats, terms.first_ids)[2] == YEAR_19XX
    # the lexical fields are never truncated and keep the number itself
    assert words(stats, terms.title_ids) == ["trial", "of", "1998"]
    assert len(terms.abstract_ids) == 60


def test_vocabulary_lookup_numbers_unknown_terms_in_order() -> None:
    vocab = Vocabulary()
    vocab.add(["cat", "dog"])
    ids = vocab.lookup(["cat", "zzz", "dog", "yyy", "zzz"])
    assert ids.tolist() == [len(NUMBER_CLASSES), -1, len(NUMBER_CLASSES) + 1, -2, -1]
    assert len(vocab) == len(NUMBER_CLASSES) + 2  # lookup never grows the table


def test_doc_terms_json_roundtrip(tiny_stats: CorpusStats) -> None:
    terms = tiny_stats.doc_terms(0)
    again = DocTerms.from_json(terms.as_json())
    for name in ("title_ids", "abstract_ids", "first_ids"):
        assert np.array_equal(getattr(again, name), getattr(terms, name))
        assert getattr(again, name).dtype == np.int32


def _mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a memory map."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)


def test_save_load_roundtrip_is_memory_mapped(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    directory = tmp_path / "tiny"
    tiny_stats.save(directory)
    loaded = CorpusStats.load(directory)
    assert loaded.version == "tiny" and loaded.doc_ids == ["a", "b", "c"]
    assert loaded.vocab.terms == tiny_stats.vocab.terms
    # file-backed: plain ndarray views of a memory map, not copies in RAM
    assert _mapped(loaded.title_values) and _mapped(loaded.df["text"])
    for name in FIELDS:
        assert np.array_equal(loaded.df[name], tiny_stats.df[name])
        assert loaded.avg_length(name) == pytest.approx(tiny_stats.avg_length(name))
    for row in range(3):
        for part in ("title_ids", "abstract_ids", "first_ids"):
            assert np.array_equal(getattr(loaded.doc_terms(row), part), getattr(tiny_stats.doc_terms(row), part))
    assert loaded.row("c") == 2
    rows = [2, 0, 2]
    for stats in (tiny_stats, loaded):  # a list of ids when built in memory, a string table when loaded
        assert stats.doc_ids_at(rows) == ["c", "a", "c"]
        for batched, row in zip(stats.doc_terms_at(rows), rows, strict=True):
            for part in ("title_ids", "abstract_ids", "first_ids"):
                assert np.array_equal(getattr(batched, part), getattr(stats.doc_terms(row), part))


def test_empty_corpus_roundtrip(tmp_path: Path) -> None:
    stats = build_stats("empty", [])
    stats.save(tmp_path / "empty")
    loaded = CorpusStats.load(tmp_path / "empty")
    assert loaded.n_docs == 0 and loaded.doc_ids == [] and loaded.avg_length("text") == 0.0


def test_incomplete_directory(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    with pytest.raises(StatsError, match="no complete statistics"):
        CorpusStats.load(tmp_path / "nothing")
    directory = tmp_path / "partial"
    tiny_stats.save(directory)
    (directory / "meta.json").unlink()  # an interrupted save writes meta.json last
    with pytest.raises(StatsError, match="no complete statistics"):
        CorpusStats.load(directory)
    tiny_stats.save(directory)
    (directory / "df_title.npy").unlink()
    with pytest.raises(StatsError, match="lack df_title.npy"):
        CorpusStats.load(directory)


def test_other_format_is_refused(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    tiny_stats.save(tmp_path)
    (tmp_path / "meta.json").write_text('{"format": 99}', encoding="utf-8")
    with pytest.raises(StatsError, match="format 99"):
        CorpusStats.load(tmp_path)


@pytest.mark.parametrize("damage", ["meta.json", "df_text.npy", "title_ptr.npy", "doc_ids.txt"])
def test_damaged_statistics_name_the_file_and_the_fix(tiny_stats: CorpusStats, tmp_path: Path, damage: str) -> None:
    tiny_stats.save(tmp_path)
    if damage == "title_ptr.npy":
        np.save(tmp_path / damage, np.zeros(2, dtype=np.int64))  # a valid array of the wrong length
    elif damage == "doc_ids.txt":
        (tmp_path / damage).write_text("only-one-id", encoding="utf-8")
    else:
        (tmp_path / damage).write_text("{garbage", encoding="utf-8")
    with pytest.raises(StatsError, match=rf"damaged \({damage}.*esrr index build"):
        CorpusStats.load(tmp_path)


def _damage(directory: Path, name: str, how: str) -> None:
    path = directory / name
    if how == "empty file":
        path.write_bytes(b"")
    elif how == "2-D":
        np.save(path, np.load(path)[None, :])
    elif how == "floats":
        np.save(path, np.load(path).astype(np.float32))
    elif how == "ids past the vocabulary":
        values = np.load(path)
        values[:] = 10**8
        np.save(path, values)
    elif how == "pointer past the values":
        ptr = np.load(path)
        ptr[-1] += 5
        np.save(path, ptr)
    elif how == "pointer going back":
        ptr = np.load(path)
        ptr[1], ptr[2] = ptr[2], ptr[1]
        np.save(path, ptr)
    elif how == "negative ids":
        values = np.load(path)
        values[0] = -3
        np.save(path, values)
    elif how == "no version":
        meta = json.loads(path.read_text(encoding="utf-8"))
        del meta["version"]
        path.write_text(json.dumps(meta), encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "how", "reason"),
    [
        ("title_ptr.npy", "empty file", "title_ptr.npy is not a readable"),
        ("abstract_values.npy", "2-D", "abstract_values.npy holds a int32 array of shape"),
        ("df_text.npy", "floats", "df_text.npy holds a float32 array"),
        ("abstract_values.npy", "ids past the vocabulary", "abstract_values.npy holds term ids outside"),
        ("embedding_of.npy", "ids past the vocabulary", "embedding_of.npy holds term ids outside"),
        ("title_ptr.npy", "pointer past the values", "title_ptr.npy does not index title_values.npy"),
        ("abstract_ptr.npy", "pointer going back", "abstract_ptr.npy does not index abstract_values.npy"),
        ("title_values.npy", "negative ids", "title_values.npy holds term ids outside"),
        ("meta.json", "no version", r"meta.json: KeyError: 'version'"),
    ],
)
def test_statistics_that_would_break_a_search_are_refused_on_load(
    tiny_stats: CorpusStats, tmp_path: Path, name: str, how: str, reason: str
) -> None:
    """A search must never index past a table: what would is refused where the version is opened."""
    tiny_stats.save(tmp_path)
    _damage(tmp_path, name, how)
    with pytest.raises(StatsError, match=rf"damaged \({reason}.*esrr index build"):
        CorpusStats.load(tmp_path, check_ids=True)
    if how in (
        "ids past the vocabulary",
        "negative ids",
    ):  # read only when asked (esrr index use): it reads the whole corpus
        assert CorpusStats.load(tmp_path).n_docs == tiny_stats.n_docs
    else:
        with pytest.raises(StatsError, match=reason):
            CorpusStats.load(tmp_path)


def test_build_stats_refuses_duplicate_document_ids() -> None:
    docs = [Document("d1", "a", "b"), Document("d1", "c", "d")]
    with pytest.raises(ValueError, match="duplicate document id 'd1'"):
        build_stats("v", docs)


def test_the_first_tokens_derived_from_title_and_abstract_are_those_tokenizing_gave(tmp_path: Path) -> None:
    """Format 3 stores no first tokens: the title and abstract ids through embedding_of give the same ids."""
    documents = [
        Document("long-title", " ".join(f"w{i}" for i in range(60)) + " 1999 25%", "ignored 3.5 words"),
        Document("numbers", "In 1998, 12 of 40 (0.3) cost $20", "and 2010 rose by 4.5% to 18-65 " * 10),
        Document("empty", "", ""),
        Document("abstract-only", "", "Calcium 1999 and vitamin K 0.25 mg"),
    ]
    expected = [terms.first_ids for _, terms in iter_doc_terms(documents, Vocabulary())]
    stats = build_stats("v", documents)
    stats.save(tmp_path / "v")
    loaded = CorpusStats.load(tmp_path / "v", check_ids=True)
    for row, first in enumerate(expected):
        for built in (stats, loaded):
            assert built.doc_terms(row).first_ids.dtype == np.int32
            np.testing.assert_array_equal(built.doc_terms(row).first_ids, first)
    np.testing.assert_array_equal(loaded.first_values, np.concatenate(expected))
    np.testing.assert_array_equal(np.diff(loaded.first_ptr), [len(f) for f in expected])
    assert not (tmp_path / "v" / "first_values.npy").exists()


def test_format_2_statistics_are_refused_with_the_rebuild(tiny_stats: CorpusStats, tmp_path: Path) -> None:
    tiny_stats.save(tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text(encoding="utf-8"))
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "format": 2}), encoding="utf-8")
    with pytest.raises(StatsError, match=r"format 2, this code reads format 3 .*esrr index build"):
        CorpusStats.load(tmp_path)


PARTS = ("title_ids", "abstract_ids", "first_ids")


def _same_as_one_by_one(stats: CorpusStats, rows: list[int]) -> None:
    """``doc_terms_at(rows)`` holds, hit for hit, what ``doc_terms`` reads of each row: values and dtype."""
    batched = stats.doc_terms_at(rows)
    assert len(batched) == len(rows)
    for terms, row in zip(batched, rows, strict=True):
        alone = stats.doc_terms(row)
        assert type(terms) is DocTerms
        for part in PARTS:
            assert getattr(terms, part).dtype == getattr(alone, part).dtype
            np.testing.assert_array_equal(getattr(terms, part), getattr(alone, part))


EDGE_DOCUMENTS = [
    Document("empty", "", ""),
    Document("long-title", " ".join(f"w{i}" for i in range(70)), "never read for the first tokens"),
    Document("title-of-50", " ".join(f"t{i}" for i in range(FIRST_TOKENS)), "past the first tokens"),
    Document("title-of-49", " ".join(f"t{i}" for i in range(FIRST_TOKENS - 1)), "one word 1999 then more"),
    Document("abstract-only", "", "Calcium 1999 and vitamin K 0.25 mg " * 12),
    Document("title-only", "Breast cancer in 2001", ""),
    Document("numbers", "In 1998, 12 of 40 (0.3) cost $20", "and 2010 rose by 4.5% to 18-65 " * 10),
]


def test_doc_terms_at_on_edge_documents_in_any_order_and_repeated(tmp_path: Path) -> None:
    stats = build_stats("edges", EDGE_DOCUMENTS)
    stats.save(tmp_path / "edges")
    loaded = CorpusStats.load(tmp_path / "edges")
    rows = [0, 6, 0, 3, 2, 1, 5, 4, 4, 0]
    for built in (stats, loaded):  # in memory, memory-mapped
        _same_as_one_by_one(built, rows)
        _same_as_one_by_one(built, [0])  # an empty document alone: no first token at all
        assert built.doc_terms_at([]) == []
        assert built.doc_terms_at(np.asarray(rows))[1].title_ids.tolist() == built.doc_terms(6).title_ids.tolist()


def test_doc_terms_at_refuses_rows_outside_the_corpus(tiny_stats: CorpusStats) -> None:
    for rows in ([0, 3], [-1]):
        with pytest.raises(IndexError, match="outside the 3 documents"):
            tiny_stats.doc_terms_at(rows)


def test_the_first_tokens_of_a_window_share_one_buffer_that_cannot_be_written(tiny_stats: CorpusStats) -> None:
    first = tiny_stats.doc_terms_at([0, 1])[0].first_ids
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 0


def test_doc_terms_built_without_init_equal_those_built_with_it(tiny_stats: CorpusStats) -> None:
    from es_rerank.stats import _doc_terms

    parts = [np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int32), np.arange(1, dtype=np.int32)]
    fast, slow = _doc_terms(*parts), DocTerms(*parts)
    assert [f.name for f in dataclasses.fields(DocTerms)] == list(PARTS)  # _doc_terms sets each field
    assert list(vars(fast)) == list(vars(slow)) and all(vars(fast)[k] is vars(slow)[k] for k in PARTS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.title_ids = parts[1]  # type: ignore[misc]


def test_doc_terms_at_on_nfcorpus_reads_what_doc_terms_reads(tmp_path: Path) -> None:
    """1500 NFCorpus documents, saved and memory-mapped as served: every row, shuffled, in windows of 500."""
    from es_rerank.settings import DEFAULT_NFCORPUS
    from index_setup.readers import read_beir_corpus

    path = DEFAULT_NFCORPUS / "corpus.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"NFCorpus is not at {path}; the edge-document test covers the same ground")
    build_stats("nf", itertools.islice(read_beir_corpus(path), 1500)).save(tmp_path / "nf")
    stats = CorpusStats.load(tmp_path / "nf")
    rows = np.random.default_rng(7).permutation(stats.n_docs).tolist()
    for start in range(0, len(rows), 500):
        _same_as_one_by_one(stats, rows[start : start + 500])
