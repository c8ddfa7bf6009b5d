"""Issue 32 on the Elasticsearch backend: the page Elasticsearch returns is weighed before the gateway passes it on.

Elasticsearch filters ``_source`` and highlights itself; the gateway bounds what it relays
(``ESRR_GATEWAY_MAX_ANSWER_BYTES``) with the same ``AnswerTooLarge`` the embedded backend raises.
"""

from __future__ import annotations

import json
import uuid

import pytest

from es_rerank.backends.answer_budget import AnswerTooLarge
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_layout import stats_root
from es_rerank.settings import CommonSettings
from tests.gateway.test_site import ARTICLES

pytestmark = pytest.mark.es


@pytest.fixture(scope="module")
def backend(es_url, es_client, tmp_path_factory: pytest.TempPathFactory):
    from index_setup.es_index import load_index

    alias = f"esrr-test-answer-{uuid.uuid4().hex[:10]}"
    settings = CommonSettings(home=tmp_path_factory.mktemp("home"), es_url=es_url, es_alias=alias)
    load_index(es_client, list(ARTICLES), settings, progress=False)
    yield ElasticsearchBackend(es_client, alias, stats_root(settings))
    for name in es_client.indices.get(index=f"{alias}*").body:
        es_client.options(ignore_status=404).indices.delete(index=name)


def test_a_page_over_the_answer_cap_is_refused_and_one_under_it_is_passed_on(backend):
    prepared = backend.prepare(
        {
            "query": {"match": {"text": "vitamin"}},
            "highlight": {"number_of_fragments": 0, "fields": {"title": {}, "abstract": {}}},
        }
    )
    hits = backend.first_stage(prepared, 10).hits
    whole = backend.page(prepared, hits)
    assert len(whole) == len(hits) == 3 and all("highlight" in entry for entry in whole)
    weight = len(json.dumps(whole, ensure_ascii=False))
    assert backend.page(prepared, hits, max_bytes=10 * weight) == whole
    with pytest.raises(AnswerTooLarge, match=r"ESRR_GATEWAY_MAX_ANSWER_BYTES=200\)"):
        backend.page(prepared, hits, max_bytes=200)
