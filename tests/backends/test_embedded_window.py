"""A window's order and hits' data on the embedded backend against the way they were built before (841026a):
a Python sort of (score, address), row, id tuples on (-score, id), and one ``doc_terms`` and one ``Hit`` per hit."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from es_rerank.backends.base import Hit, text_body, unread_hits
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.embedded_order import best_first
from es_rerank.settings import DEFAULT_NFCORPUS
from index_setup.embedded_index import build_embedded_index
from index_setup.readers import read_beir_corpus

PARTS = ("title_ids", "abstract_ids", "first_ids")
QUERIES = ("cancer", "diet and mortality", "breast cancer statin", "vitamin d", "meat", "risk of heart disease")


def ranked_before(backend: EmbeddedBackend, scored: list, k: int) -> list[Hit]:
    """``EmbeddedBackend._ranked`` as it was (841026a)."""
    stats = backend.stats
    rows = backend._int_values("row", [address for _, address in scored])
    ids = stats.doc_ids_at(rows)
    ranked = sorted(zip(scored, rows, ids), key=lambda item: (-item[0][0], item[2]))[:k]
    return [
        Hit(doc_id, float(score), "", stats.doc_terms(int(row)), address) for (score, address), row, doc_id in ranked
    ]


def assert_same_hits(new: list[Hit], old: list[Hit]) -> None:
    assert [(h.doc_id, h.score, h.title, h.address) for h in new] == [
        (h.doc_id, h.score, h.title, h.address) for h in old
    ]
    for a, b in zip(new, old, strict=True):
        assert type(a) is Hit and type(a.terms) is type(b.terms)
        for part in PARTS:
            assert getattr(a.terms, part).dtype == getattr(b.terms, part).dtype
            np.testing.assert_array_equal(getattr(a.terms, part), getattr(b.terms, part))


@pytest.fixture(scope="module")
def nfcorpus(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBackend:
    path = DEFAULT_NFCORPUS / "corpus.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"NFCorpus is not at {path}; the property test of the order covers the ties")
    root = tmp_path_factory.mktemp("nfcorpus")
    build_embedded_index(list(itertools.islice(read_beir_corpus(path), 1500)), root, progress=False)
    return EmbeddedBackend.open_current(root)


@pytest.mark.parametrize("k", [1, 10, 100, 500])
def test_windows_of_nfcorpus_are_the_hits_built_before(nfcorpus: EmbeddedBackend, k: int) -> None:
    tied = 0
    for query in QUERIES:
        scored, _ = nfcorpus._top(nfcorpus.prepare(text_body(query)).query, k)
        tied += len({score for score, _ in scored}) < len(scored)
        assert_same_hits(nfcorpus._ranked(scored, k), ranked_before(nfcorpus, scored, k))
    assert tied  # duplicates of NFCorpus tie: the order by id is exercised on real windows


def test_a_sorted_search_carries_each_hit_s_data(nfcorpus: EmbeddedBackend) -> None:
    body = {"query": {"match": {"text": "cancer"}}, "sort": [{"year": "desc"}]}
    hits = nfcorpus.first_stage(nfcorpus.prepare(body), 300).hits
    assert len(hits) > 200
    for hit in hits:
        alone = nfcorpus.stats.doc_terms(nfcorpus.stats.row(hit.doc_id))
        for part in PARTS:
            np.testing.assert_array_equal(getattr(hit.terms, part), getattr(alone, part))


SCORES = st.sampled_from([0.0, -0.0, 1.0, 1.0000001, 2.5, -3.0, 7.25]) | st.floats(-1e6, 1e6)


@given(
    st.lists(st.tuples(SCORES, st.text(alphabet="ab\x00éZ9-", max_size=4)), max_size=40, unique_by=lambda p: p[1]),
    st.integers(1, 45),
)
def test_best_first_is_the_sort_on_minus_score_then_id(hits: list[tuple[float, str]], k: int) -> None:
    scores, ids = [s for s, _ in hits], [i for _, i in hits]
    assert best_first(scores, ids, k) == sorted(range(len(hits)), key=lambda i: (-scores[i], ids[i]))[:k]


def test_unread_hits_are_the_hits_init_builds() -> None:
    terms = object()
    fast = unread_hits(["d1", "d2"], [2.0, 1.0], [terms, terms], ["a1", None])
    slow = [Hit("d1", 2.0, "", terms, "a1"), Hit("d2", 1.0, "", terms, None)]  # type: ignore[arg-type]
    assert [f.name for f in dataclasses.fields(Hit)] == ["doc_id", "score", "title", "terms", "address"]
    assert fast == slow and [list(vars(h).items()) for h in fast] == [list(vars(h).items()) for h in slow]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast[0].score = 3.0  # type: ignore[misc]
    assert unread_hits([], [], [], []) == []
