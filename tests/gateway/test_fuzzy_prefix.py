"""Issue 35: fuzzy words and prefixes on the embedded backend, through the official client: the bodies Haystack's
``ElasticsearchBM25Retriever`` and search-as-you-type clients send, reranked, and their cost bounded by the
``QueryLimits`` with a 400 that names the limit and its setting.

Which documents each form finds is checked against real Elasticsearch 7.17 in
``tests/backends/test_query_semantics.py``; here the gateway serves them end to end.
"""

from __future__ import annotations

import pytest
from elasticsearch import BadRequestError

from tests.conftest import official_client
from tests.gateway.test_query_dsl import docs_app


def haystack_bm25_body(query: str, top_k: int = 10) -> dict:
    """What elasticsearch-haystack's ``ElasticsearchDocumentStore._bm25_retrieval`` sends with the retriever's
    defaults (fuzziness "AUTO", no fields; haystack-core-integrations, integrations/elasticsearch)."""
    return {
        "size": top_k,
        "query": {
            "bool": {
                "must": [
                    {"multi_match": {"query": query, "fuzziness": "AUTO", "type": "most_fields", "operator": "OR"}}
                ]
            }
        },
    }


@pytest.fixture(scope="module")
def es(tmp_path_factory: pytest.TempPathFactory, free_port):
    app = docs_app(tmp_path_factory.mktemp("fuzzy"), gateway_max_query_terms=120, gateway_max_wildcard_terms=2)
    with official_client(app, free_port()) as client:
        yield client


def _ids(answer) -> set[str]:
    return {hit["_id"] for hit in answer["hits"]["hits"]}


def test_haystacks_bm25_retriever_body_finds_misspelt_words_and_is_reranked(es):
    answer = es.search(index="_all", from_=0, **haystack_bm25_body("gren tee"))
    # "gren" is 1 edit from green (1, 2, 4, 5 hold it), "tee" 1 from tea (1, 2, 5); AUTO allows 4 letters 1 edit.
    assert _ids(answer) == {"1", "2", "4", "5"}
    assert all(hit["fields"]["reranked"] == [True] for hit in answer["hits"]["hits"])
    assert "skipped" not in answer["esrr"]
    # The exact word scores above its near misses: doc 1 holds both words twice.
    assert answer["hits"]["hits"][0]["fields"]["bm25_score"][0] > 0


def test_fuzziness_zero_and_short_words_search_the_words_themselves(es):
    assert _ids(es.search(query={"match": {"text": {"query": "tee", "fuzziness": 0}}})) == set()
    assert _ids(es.search(query={"match": {"text": {"query": "te", "fuzziness": "AUTO"}}})) == set()


def test_search_as_you_type_forms(es):
    bool_prefix = {"multi_match": {"query": "green extr", "type": "bool_prefix", "fields": ["title", "abstract"]}}
    assert _ids(es.search(query=bool_prefix)) == {"1", "2", "4", "5"}  # green, or a word starting with extr
    phrase_prefix = {"match_phrase_prefix": {"text": "green tea ext"}}
    assert _ids(es.search(query=phrase_prefix)) == {"5"}
    assert _ids(es.search(query={"prefix": {"text": "vege"}})) == {"4"}
    assert _ids(es.search(query={"prefix": {"journal": "Nutr"}})) == {"1", "4"}


def test_too_many_fuzzy_expansions_is_a_400_naming_the_limit_and_its_setting(es):
    # Three fuzzy words of 50 expansions each are 150 words searched, over the 120 this gateway allows.
    with pytest.raises(BadRequestError) as caught:
        es.search(**haystack_bm25_body("green breast cancer"))
    message = str(caught.value)
    assert "150 words searched" in message and "ESRR_GATEWAY_MAX_QUERY_TERMS" in message
    assert "max_expansions" in message
    body = haystack_bm25_body("green breast cancer")
    body["query"]["bool"]["must"][0]["multi_match"]["max_expansions"] = 10
    assert _ids(es.search(**body))  # 30 expansions: served


def test_prefixes_count_as_wildcard_words(es):
    query = {"bool": {"should": [{"prefix": {"text": prefix}} for prefix in ("gre", "te", "can")]}}
    with pytest.raises(BadRequestError) as caught:
        es.search(query=query)
    assert "3 wildcard words" in str(caught.value) and "ESRR_GATEWAY_MAX_WILDCARD_TERMS" in str(caught.value)
    with pytest.raises(BadRequestError, match="MAX_LEADING_WILDCARDS"):
        es.search(query={"prefix": {"text": ""}})  # every word of the index


def test_fuzzy_options_are_read_as_elasticsearch_reads_them(es):
    with pytest.raises(BadRequestError, match="fuzziness must be 0, 1, 2"):
        es.search(query={"match": {"text": {"query": "tea", "fuzziness": "lots"}}})
    with pytest.raises(BadRequestError, match=r"Fuzziness not allowed for type \[phrase\]"):
        es.search(query={"multi_match": {"query": "green tea", "type": "phrase", "fuzziness": 1}})
    with pytest.raises(BadRequestError, match="max_expansions must be a whole number of at least 1"):
        es.search(query={"match_phrase_prefix": {"text": {"query": "green t", "max_expansions": 0}}})


def test_a_null_fuzziness_in_query_string_is_its_default(es):
    query = {"query": "gren~", "fields": ["text"]}
    expected = _ids(es.search(query={"query_string": query}))
    assert expected, "gren~ must find green for the comparison to mean something"
    assert _ids(es.search(query={"query_string": {**query, "fuzziness": None}})) == expected
