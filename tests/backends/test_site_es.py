"""The site search page in front of Elasticsearch (noida-db, or ``ESRR_TEST_ES_URL``): its request passes through,
and the page reads Elasticsearch's own highlight and aggregation shapes.

The page's views are tested over the embedded backend in ``tests/gateway/test_site.py``; here the
search engine is the Elasticsearch stand-in, so the answer the page renders is one Elasticsearch wrote.
"""

from __future__ import annotations

import re
import uuid

import pytest

from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_layout import stats_root
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.settings import CommonSettings
from tests.gateway.test_site import ARTICLES, BROWSER

pytestmark = pytest.mark.es


@pytest.fixture(scope="module")
def site(es_url, es_client, tmp_path_factory: pytest.TempPathFactory):
    """A test client of the gateway over an Elasticsearch index of ``ARTICLES``."""
    from index_setup.es_index import load_index

    alias = f"esrr-test-site-{uuid.uuid4().hex[:10]}"
    settings = CommonSettings(home=tmp_path_factory.mktemp("home"), es_url=es_url, es_alias=alias)
    load_index(es_client, list(ARTICLES), settings, progress=False)
    backend = ElasticsearchBackend(es_client, alias, stats_root(settings))
    served = ServedSearch(SearchPipeline(backend, 10), 3600)
    yield create_app(served, GatewaySettings(**settings.model_dump())).test_client()
    for name in es_client.indices.get(index=f"{alias}*").body:
        es_client.options(ignore_status=404).indices.delete(index=name)


def test_the_page_shows_elasticsearchs_highlights_and_counts(site):
    response = site.get("/?q=vitamin", headers=BROWSER)
    page = response.get_data(as_text=True)
    assert response.status_code == 200, page
    titles = re.findall(r'<li class="result">\s*<h3>(.*?)</h3>', page, re.S)
    assert len(titles) == 3 and sum("<em>Vitamin</em>" in title for title in titles) == 2  # 2's title lacks it
    assert '<a href="https://pubmed.ncbi.nlm.nih.gov/1/">' in page
    assert "&lt;deficiency&gt; &amp; bone" in page  # escaped by Elasticsearch's html encoder, not twice
    assert re.search(r'value="Journal Article"\s*>\s*Journal Article <span class="meta">\(2\)', page)
    assert "<li>1999: 1</li>" in page and "<li>2015: 1</li>" in page


def test_the_pages_filters_pass_through_to_elasticsearch(site):
    page = site.get("/?q=vitamin&year_from=2000&type=Journal+Article", headers=BROWSER).get_data(as_text=True)
    titles = re.findall(r'<li class="result">\s*<h3>(.*?)</h3>', page, re.S)
    assert sorted(re.findall(r"pubmed\.ncbi\.nlm\.nih\.gov/(\d+)/", " ".join(titles))) == ["1", "2"]
    assert "2 results; showing 1–2, page 1 of 1." in page
