"""The expansions of fuzzy words and prefixes (es_rerank/backends/term_expansion.py): Lucene's edit distance,
its choice of the ``max_expansions`` nearest words, ``prefix_length``, and a prefix's first words in term order."""

from __future__ import annotations

import random

import numpy as np

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.backends.term_expansion import REGEX_STATES, TermDictionary, _within_states, edit_distances
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.backends.test_query_semantics import edits

WORDS = ["t", "ta", "tea", "teas", "pea", "sea", "ten", "team", "tear", "tae", "eat", "tease", "teapot"]


def _codes(word: str) -> np.ndarray:
    return np.frombuffer(word.encode("utf-32-le"), dtype=np.uint32)


def test_edit_distances_are_the_dynamic_programmings_of_every_pair():
    draw = random.Random(35)
    for _ in range(400):
        word = "".join(draw.choice("abc") for _ in range(draw.randint(0, 6)))
        length = draw.randint(1, 6)
        others = ["".join(draw.choice("abc") for _ in range(length)) for _ in range(6)]
        matrix = np.stack([_codes(other) for other in others])
        for transpositions in (True, False):
            assert edit_distances(_codes(word), matrix, transpositions).tolist() == [
                edits(word, other, transpositions) for other in others
            ]


def test_the_nearest_words_are_kept_then_the_first_in_term_order():
    words = TermDictionary(WORDS)
    found = words.fuzzy("tea", 1, max_expansions=100)
    assert [word for word, _ in found] == ["tea", "pea", "sea", "tae", "team", "tear", "teas", "ten", "ta"]
    assert found[0][1] == 1.0 and found[1][1] == 1 - 1 / 3 and found[-1][1] == 1 - 1 / 2  # 1 - edits / shorter
    assert [word for word, _ in words.fuzzy("tea", 1, max_expansions=3)] == ["tea", "pea", "sea"]
    assert "tae" not in {word for word, _ in words.fuzzy("tea", 1, transpositions=False)}  # a swap is 2 edits then
    assert "eat" in {word for word, _ in words.fuzzy("tea", 2)}


def test_prefix_length_keeps_the_first_characters():
    found = {word for word, _ in TermDictionary(WORDS).fuzzy("tea", 1, prefix_length=2)}
    assert found == {"tea", "team", "tear", "teas", "ten"}  # not pea, sea, ta, tae


def test_a_prefix_stands_for_its_first_words_in_term_order():
    words = TermDictionary(WORDS)
    assert words.starting_with("te", 3) == ["tea", "team", "teapot"]
    assert words.starting_with("tea", 50) == ["tea", "team", "teapot", "tear", "teas", "tease"]
    assert words.starting_with("x", 50) == []


def test_many_expansions_are_split_into_expressions_tantivy_compiles():
    words = [f"a{n:04d}" for n in range(1500)]
    groups = _within_states(words, 1)
    assert [word for group in groups for word in group] == words and len(groups) > 1
    assert all(1 + sum(len(word) for word in group) <= REGEX_STATES for group in groups)


def test_a_phrase_prefix_of_a_thousand_expansions_finds_the_first_thousand(tmp_path):
    """More expansions than one of tantivy's regular expressions holds (1,000 states): the phrase still finds the
    documents of the first ``max_expansions`` words in term order, and nothing fails."""
    docs = [Document(f"d{n}", "notes", f"of a{n:04d}") for n in range(1500)]
    build_embedded_index(docs, tmp_path, progress=False)
    backend = EmbeddedBackend.open_current(tmp_path)
    query = {"match_phrase_prefix": {"text": {"query": "of a", "max_expansions": 1000}}}
    hits = backend.first_stage(backend.prepare({"query": query}), 1500).hits
    assert {hit.doc_id for hit in hits} == {f"d{n}" for n in range(1000)}
