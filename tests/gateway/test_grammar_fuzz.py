"""Hypothesis over the served query grammar (issue 32): query strings with ``~N``, wildcards and nested groups,
match_phrase with slop, highlight, ``_source``, aggregations, ``_count`` and ``_msearch`` bodies; never a 5xx, and no
request costs more than its CPU budget in this thread (``time.thread_time``), whatever it asks.

Bounded for CI (150 examples a test, no example database written).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.gateway.test_fuzz import _timed
from tests.gateway.test_query_limits import COMMON, VOCABULARY, _app

GRAMMAR = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# A generous margin over the 100 ms floor: the machine is shared, and this measures the whole request in-process.
CPU_BUDGET_S = 0.3

words = st.sampled_from(VOCABULARY + ["Vitamin", "d", "2010", "x"])
wildcards = st.builds(
    lambda word, cut, mark, lead: ("?" if lead else "") + word[:cut] + mark,
    words,
    st.integers(1, 6),
    st.sampled_from(["*", "?", "??", "*?*", "?" * 12, "?" * 70]),
    st.booleans(),
)
# Phrases of the most frequent words, repeated, are the sloppy phrase scorer's worst case (issue 32).
phrase_words = st.one_of(st.lists(words, min_size=1, max_size=25), st.lists(st.sampled_from(COMMON[:4]), max_size=24))
phrases = st.builds(
    lambda items, slop: '"' + " ".join(items) + '"' + (f"~{slop}" if slop is not None else ""),
    phrase_words,
    st.one_of(st.none(), st.integers(0, 150), st.integers(0, 10**40)),
)
fields = st.sampled_from(["", "text:", "year:", "journal:", "title:", "Pork: "])
atoms = st.one_of(
    words,
    wildcards,
    phrases,
    st.builds(lambda f, w: f + w, fields, words),
    st.builds(lambda w, b: f"{w}^{b}", words, st.sampled_from(["2", "0.5", "", "x"])),
    st.sampled_from(
        ["year:[2000 TO 2010]", "*", "?", "\\?", "!", "AND", "~", "/re/", "\ud800", "(" * 1000 + "bone" + ")" * 1000]
    ),
)


def _grouped(inner):
    return st.builds(
        lambda items, op, sign: sign + "(" + f" {op} ".join(items) + ")",
        st.lists(inner, min_size=1, max_size=4),
        st.sampled_from(["", "AND", "OR", "&&", "||"]),
        st.sampled_from(["", "+", "-", "NOT ", "!"]),
    )


query_strings = st.recursive(atoms, _grouped, max_leaves=40).map(str) | st.lists(atoms, max_size=40).map(" ".join)
queries = st.one_of(
    st.builds(
        lambda text, op: {"query_string": {"query": text, "default_operator": op}},
        query_strings,
        st.sampled_from(["or", "and", "AND"]),
    ),
    st.builds(lambda text: {"simple_query_string": {"query": text}}, query_strings),
    st.builds(
        lambda items, slop: {"match_phrase": {"text": {"query": " ".join(items), "slop": slop}}},
        phrase_words,
        st.integers(-1, 150),
    ),
    st.builds(
        lambda field, value: {"term": {field: value}},
        st.sampled_from(["journal", "doc_id", "year", "text"]),
        st.one_of(st.text(max_size=20), st.just("\ud800"), st.integers()),
    ),
    st.builds(lambda text: {"match": {"text": text}}, query_strings),
)
bodies = st.fixed_dictionaries(
    {"query": queries},
    optional={
        "size": st.integers(0, 50),
        "highlight": st.fixed_dictionaries(
            {
                "fields": st.dictionaries(
                    st.sampled_from(["title", "abstract", "*"]),
                    st.fixed_dictionaries(
                        {}, optional={"number_of_fragments": st.integers(0, 5), "fragment_size": st.integers(1, 300)}
                    ),
                    max_size=2,
                )
            }
        ),
        "_source": st.one_of(
            st.booleans(), st.lists(st.sampled_from(["title", "abstract", "year", "a*", "*"]), max_size=4)
        ),
        "aggs": st.dictionaries(
            st.sampled_from(["by_year", "types"]),
            st.builds(
                lambda field, size: {"terms": {"field": field, "size": size}},
                st.sampled_from(["year", "publication_types", "journal", "text"]),
                st.integers(0, 2000),
            ),
            max_size=2,
        ),
        "post_filter": queries,
    },
)


@pytest.fixture(scope="module")
def client(home):
    client = _app(home).test_client()
    client.get("/_search?q=bone")  # first-request set-up is no request's cost
    return client


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    from index_setup.embedded_index import build_embedded_index
    from tests.gateway.test_query_limits import synthetic_documents

    home = tmp_path_factory.mktemp("grammar")
    build_embedded_index(synthetic_documents(400), home / "indexes" / "embedded", version="v1", progress=False)
    return home


def _check(response, cpu_s: float, searches: int = 1) -> None:
    assert response.status_code < 500, response.get_data()[:400]
    assert cpu_s / searches < CPU_BUDGET_S, f"{cpu_s * 1000:.0f} ms of CPU for {searches} search(es)"
    if response.status_code != 200:
        body = response.get_json()
        assert body["status"] == response.status_code and body["error"]["reason"]


@GRAMMAR
@given(body=bodies)
@example(body={"query": {"term": {"year": 2**63}}})  # past tantivy's i64: was a 500
@example(body={"query": {"range": {"year": {"gte": -(2**40)}}}})
def test_any_served_search_body_is_answered_or_refused_within_its_cpu(client, body):
    _check(*_timed(client, path="/_search", method="POST", data=json.dumps(body), content_type="application/json"))


@GRAMMAR
@given(query=queries)
def test_any_served_count_is_answered_or_refused_within_its_cpu(client, query):
    _check(
        *_timed(
            client, path="/_count", method="POST", data=json.dumps({"query": query}), content_type="application/json"
        )
    )


@GRAMMAR
@given(text=query_strings, df=st.sampled_from(["text", "title", "_all"]))
def test_any_q_parameter_is_answered_or_refused_within_its_cpu(client, text, df):
    response, cpu_s = _timed(
        client, path="/_search", method="GET", query_string={"q": text.encode("utf-8", "surrogatepass"), "df": df}
    )
    _check(response, cpu_s)


@GRAMMAR
@given(
    searches=st.lists(
        st.tuples(st.sampled_from([{}, {"index": "esrr-docs"}, {"index": "nope"}]), bodies), min_size=1, max_size=6
    )
)
def test_any_msearch_of_served_searches_answers_each_slot(client, searches):
    data = "".join(json.dumps(header) + "\n" + json.dumps(body) + "\n" for header, body in searches)
    response, cpu_s = _timed(client, path="/_msearch", method="POST", data=data, content_type="application/x-ndjson")
    _check(response, cpu_s, len(searches))
    assert response.status_code == 200
    answers = response.get_json()["responses"]
    assert len(answers) == len(searches) and all(answer["status"] < 500 for answer in answers)
