"""The tokenizer on the hard cases of biomedical text (section 4.1 of the Delta paper)."""

from __future__ import annotations

import pytest

from es_rerank.text import (
    DOLLAR,
    FRACTION,
    INTEGER,
    NUMBER_CLASSES,
    PERCENTAGE,
    REAL,
    YEAR_19XX,
    YEAR_20XX,
    embedding_token,
    embedding_tokens,
    number_class,
    tokenize,
)

# text, lexical tokens, embedding-path tokens
CASES = [
    # entity names with hyphens stay one token
    ("IL-6", ["il-6"], ["il-6"]),
    ("COVID-19", ["covid-19"], ["covid-19"]),
    ("α-synuclein", ["α-synuclein"], ["α-synuclein"]),
    ("TNF-α", ["tnf-α"], ["tnf-α"]),
    ("5-HT2A", ["5-ht2a"], ["5-ht2a"]),
    ("IL-1β", ["il-1β"], ["il-1β"]),
    ("omega-3", ["omega-3"], ["omega-3"]),
    # plain English compounds split
    ("well-known", ["well", "known"], ["well", "known"]),
    ("anti-inflammatory", ["anti", "inflammatory"], ["anti", "inflammatory"]),
    # dotted abbreviations keep their dots (not "us")
    ("U.S.", ["u.s."], ["u.s."]),
    ("e.g.", ["e.g."], ["e.g."]),
    ("e.g., in", ["e.g.", "in"], ["e.g.", "in"]),
    ("Dr. Smith", ["dr", "smith"], ["dr", "smith"]),
    # the seven number classes
    ("1998", ["1998"], [YEAR_19XX]),
    ("2017", ["2017"], [YEAR_20XX]),
    ("0.25", ["0.25"], [FRACTION]),
    (".5 mg", [".5", "mg"], [FRACTION, "mg"]),
    ("3.5", ["3.5"], [REAL]),
    ("1.0", ["1.0"], [REAL]),
    ("42", ["42"], [INTEGER]),
    ("1,000", ["1,000"], [INTEGER]),
    ("3.5%", ["3.5%"], [PERCENTAGE]),
    ("95 % CI", ["95%", "ci"], [PERCENTAGE, "ci"]),
    ("95\u00a0% CI", ["95%", "ci"], [PERCENTAGE, "ci"]),  # no-break space
    ("$\u2009120", ["$120"], [DOLLAR]),  # thin space
    ("$20", ["$20"], [DOLLAR]),
    ("$ 1.5 million", ["$1.5", "million"], [DOLLAR, "million"]),
    # numbers inside punctuation and sentences
    ("in 1998.", ["in", "1998"], ["in", YEAR_19XX]),
    ("p<0.05", ["p", "0.05"], ["p", FRACTION]),
    ("(n = 30)", ["n", "30"], ["n", INTEGER]),
    ("10(-6)", ["10", "-6"], [INTEGER, INTEGER]),
    ("-0.5", ["-0.5"], [REAL]),
    # ranges of bare numbers split, each number keeps its class
    ("aged 18-65", ["aged", "18", "65"], ["aged", INTEGER, INTEGER]),
    ("1-2%", ["1%", "2%"], [PERCENTAGE, PERCENTAGE]),
    ("2010–2015", ["2010", "2015"], [YEAR_20XX, YEAR_20XX]),
    # a number with a word part is one compound
    ("3.5-fold", ["3.5-fold"], ["3.5-fold"]),
    ("1,000-fold", ["1,000-fold"], ["1,000-fold"]),
    # possessives and contractions
    ("Müller's", ["müller"], ["müller"]),
    ("Müller’s", ["müller"], ["müller"]),
    ("don't", ["don't"], ["don't"]),
    # punctuation inside and around words
    ("mg/kg", ["mg", "kg"], ["mg", "kg"]),
    ("CD4+ T-cells", ["cd4", "t", "cells"], ["cd4", "t", "cells"]),
    ('"Quoted" (text)!', ["quoted", "text"], ["quoted", "text"]),
    # nothing to tokenize
    ("", [], []),
    ("   \n\t ", [], []),
    ("-- ; ... !", [], []),
]


@pytest.mark.parametrize(("text", "lexical", "embedding"), CASES, ids=[c[0] or "<empty>" for c in CASES])
def test_hard_cases(text: str, lexical: list[str], embedding: list[str]) -> None:
    tokens = tokenize(text)
    assert tokens == lexical
    assert embedding_tokens(tokens) == embedding


def test_sentence_mixes_all_rules() -> None:
    text = "The U.S. FDA (e.g. in 2017) said IL-6 rose 3.5-fold, by 25% or $20."
    assert tokenize(text) == [
        "the",
        "u.s.",
        "fda",
        "e.g.",
        "in",
        "2017",
        "said",
        "il-6",
        "rose",
        "3.5-fold",
        "by",
        "25%",
        "or",
        "$20",
    ]


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("0", INTEGER),
        ("0.0", REAL),
        ("0.999", FRACTION),
        ("1999", YEAR_19XX),
        ("2000", YEAR_20XX),
        ("19999", INTEGER),
        ("1,998", INTEGER),
        ("-1998", INTEGER),
        ("1998%", PERCENTAGE),
        ("$1998", DOLLAR),
        ("il-6", None),
        ("$", None),
        ("%", None),
        ("word", None),
    ],
)
def test_number_class(token: str, expected: str | None) -> None:
    assert number_class(token) == expected
    assert embedding_token(token) == (expected or token)


def test_number_classes_are_seven_distinct_tokens_no_tokenizer_output_can_produce() -> None:
    assert len(set(NUMBER_CLASSES)) == 7
    for cls in NUMBER_CLASSES:
        assert tokenize(cls) != [cls]


def test_no_token_holds_whitespace_on_real_abstracts() -> None:
    """word2vec's line corpus and tantivy's whitespace analyzer both rely on it."""
    import gzip
    import itertools
    import json

    from es_rerank.settings import DEFAULT_NFCORPUS

    path = DEFAULT_NFCORPUS / "corpus.jsonl.gz"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for record in map(json.loads, itertools.islice(lines, 1000)):
            for token in tokenize(record["title"] + " " + record["text"]):
                assert token and token.split() == [token], token
    assert all(t.split() == [t] for t in tokenize("95\u00a0% and $\u2009120 and 3\u202f%"))
