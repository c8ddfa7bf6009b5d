"""The site page's views (``es_rerank.gateway.site``) over a real embedded index, through Flask's test client.

What a browser does with the page (type, filter, page) is ``test_site_browser.py``, in Chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from es_rerank.backends.elasticsearch import ElasticsearchBackend, _Served
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.ranking.pipeline import SearchPipeline
from es_rerank.ranking.served import ServedSearch
from es_rerank.stats import Document
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS

# With the metadata people read; 1 and 2 are PMIDs, "MED-3" is not.
ARTICLES = (
    Document(
        "1",
        "Vitamin D and bone loss",
        "Vitamin D <deficiency> & bone loss in older adults.",
        "Nutrients",
        2004,
        ("Smith JA", "Lee K", "Ortiz M", "Chen W"),
        (),
        ("Journal Article", "Review"),
    ),
    Document(
        "2",
        "Bone health in children",
        "Calcium and vitamin K support bone health.",
        "Pediatrics",
        2015,
        ("Doe J",),
        (),
        ("Journal Article",),
    ),
    Document("MED-3", "Vitamin C and colds", "Vitamin C shortens colds.", "BMJ", 1999, (), (), ("Letter",)),
)
BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"}
ES_CLIENT = {"Accept": "application/vnd.elasticsearch+json; compatible-with=8"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    build_embedded_index(list(TINY_DOCS), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    return tmp_path


def _client(home: Path, backend=None, **settings):
    backend = backend or EmbeddedBackend.open_current(home / "indexes" / "embedded")
    served = ServedSearch(SearchPipeline(backend, 10), 5.0)
    return create_app(served, GatewaySettings(home=home, **settings)).test_client()


def _results(page: str) -> list[str]:
    """The results' titles as HTML, in order."""
    return re.findall(r'<li class="result">\s*<h3>(.*?)</h3>', page, re.S)


def _error(page: str) -> str:
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', page, re.S)
    assert found, page
    return found.group(1)


def test_a_browser_gets_the_page_at_the_root(home):
    response = _client(home).get("/", headers=BROWSER)
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and response.mimetype == "text/html"
    assert "Accept" in response.vary  # a cache keeps the page and the JSON apart
    for landmark in ("<header>", "<main ", 'role="search"', '<label for="q">', 'aria-live="polite"'):
        assert landmark in page
    assert "Type words to search" in page and "<aside" not in page  # no filters before a search
    assert "default-src 'none'" in response.headers["Content-Security-Policy"]


@pytest.mark.parametrize(
    "headers",
    [ES_CLIENT, {"Accept": "application/json"}, {"Accept": "*/*"}, {}],
    ids=["es-client", "json", "curl", "none"],
)
def test_every_other_client_still_gets_the_json_info(home, headers):
    response = _client(home).get("/", headers=headers)
    assert response.status_code == 200 and response.get_json()["name"] == "es-rerank"
    assert "Accept" in response.vary


def test_the_page_can_be_turned_off(home):
    response = _client(home, gateway_site=False).get("/?q=bone", headers=BROWSER)
    assert response.get_json()["name"] == "es-rerank"


def test_a_field_out_of_range_is_a_message_on_the_page_with_the_search_kept(home):
    response = _client(home).get("/?q=vitamin+bone&year_from=2020&year_to=1999", headers=BROWSER)
    page = response.get_data(as_text=True)
    assert response.status_code == 400 and "put the earlier year first" in _error(page)
    assert 'value="vitamin bone"' in page


def test_a_request_the_gateway_refuses_is_a_message_on_the_page(home):
    response = _client(home, gateway_max_query_words=3).get("/?q=vitamin+d+bone+loss+calcium", headers=BROWSER)
    assert response.status_code == 400 and "5 words" in _error(response.get_data(as_text=True))


def test_a_backend_that_cannot_answer_is_a_message_on_the_page_not_a_500(home, es_stub, tiny_stats):
    refusal = {
        "error": {"type": "cluster_block_exception", "reason": "blocked by: [SERVICE_UNAVAILABLE]"},
        "status": 503,
    }
    client = Elasticsearch(es_stub(503, refusal), max_retries=0)
    backend = ElasticsearchBackend(client, "esrr-docs", home, served=_Served("esrr-v1", tiny_stats))
    response = _client(home, backend=backend).get("/?q=vitamin", headers=BROWSER)
    assert response.status_code == 503
    assert _error(response.get_data(as_text=True)).startswith("The search engine cannot answer right now")


def test_a_search_shows_the_results_filters_and_pages(tmp_path):
    build_embedded_index(list(ARTICLES), tmp_path / "indexes" / "embedded", version="v1", progress=False)
    client = _client(tmp_path)
    response = client.get("/?q=vitamin", headers=BROWSER)
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and len(_results(page)) == 3
    assert '<a href="https://pubmed.ncbi.nlm.nih.gov/1/"><em>Vitamin</em> D and bone loss</a>' in page
    assert "<em>Vitamin</em> C and colds" in page and "pubmed.ncbi.nlm.nih.gov/MED-3" not in page
    assert "Smith JA, Lee K, Ortiz M, et al." in page and "Nutrients" in page and ">2004<" in page
    assert "&lt;deficiency&gt; &amp; bone" in page  # the abstract's text escaped, only <em> is markup
    assert re.search(r'value="Review"\s*>\s*Review <span class="meta">\(1\)', page)  # a type with its count
    assert "3 results; showing 1–3, page 1 of 1." in page and 'aria-label="Result pages"' not in page

    filtered = client.get("/?q=vitamin&year_from=2000&type=Review", headers=BROWSER).get_data(as_text=True)
    assert [title for title in _results(filtered)] == [
        '<a href="https://pubmed.ncbi.nlm.nih.gov/1/"><em>Vitamin</em> D and bone loss</a>'
    ]
    assert re.search(r'value="Review"\s*checked>', filtered) and 'value="2000"' in filtered

    past = client.get("/?q=vitamin&page=2", headers=BROWSER).get_data(as_text=True)
    assert "No results on page 2; there are 3 results." in past
    assert '<a href="/?q=vitamin" rel="prev">Previous</a>' in past and 'rel="next"' not in past  # back to page 1


def test_a_result_shows_its_whole_title_a_pubmed_link_and_no_marked_stop_words(tmp_path):
    long_title = (
        "Effects of a twelve week programme of supervised exercise and dietary advice on bone density "
        "in postmenopausal women with low vitamin D"
    )
    articles = [
        Document(
            "MED-4",
            long_title,
            "Exercise and vitamin D for bone density.",
            "Bone",
            2011,
            metadata={"url": "http://www.ncbi.nlm.nih.gov/pubmed/25329299"},
        ),
        *ARTICLES,
    ]
    build_embedded_index(articles, tmp_path / "indexes" / "embedded", version="v1", progress=False)
    page = _client(tmp_path).get("/?q=vitamin+and+bone", headers=BROWSER).get_data(as_text=True)
    shown = {re.sub(r"<[^>]*>", "", title): title for title in _results(page)}
    assert long_title in shown  # whole, not the first 100-character fragment
    assert shown[long_title].startswith('<a href="https://pubmed.ncbi.nlm.nih.gov/25329299/">')  # metadata.url's
    assert "<em>vitamin</em> D" in shown[long_title] and "<em>bone</em> density" in shown[long_title]
    assert "<em>and</em>" not in page.lower()  # "and" matched, yet is not marked
