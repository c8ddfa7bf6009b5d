"""The site page's pure parts (``es_rerank.gateway.site_search``): the form -> the body, a response -> the view."""

from __future__ import annotations

import pytest
from markupsafe import Markup

from es_rerank.gateway.site_search import (
    MAX_PAGE,
    SiteQuery,
    SiteQueryError,
    author_line,
    highlighted,
    pubmed_url,
    result_view,
    results_view,
    search_body,
    site_query,
)

# As Elasticsearch 8 answers the page's request (from 10, a year filter) with "encoder": "html".
RESPONSE = {
    "took": 12,
    "timed_out": False,
    "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
    "hits": {
        "total": {"value": 500, "relation": "gte"},
        "max_score": 4.2,
        "hits": [
            {
                "_index": "esrr-v3",
                "_id": "31452104",
                "_score": 4.2,
                "_source": {
                    "doc_id": "31452104",
                    "title": "Green tea & breast cancer",
                    "abstract": "Catechins...",
                    "journal": "Nutrients",
                    "year": 2019,
                    "authors": ["Smith JA", "Lee K", "Ortiz M", "Chen W"],
                    "mesh": ["Tea", "Breast Neoplasms"],
                    "publication_types": ["Journal Article", "Review"],
                    "doi": "10.3390/nu11081234",
                },
                "highlight": {
                    "title": ["<em>Green</em> <em>tea</em> &amp; breast cancer"],
                    "abstract": [
                        "drinking <em>green</em> <em>tea</em> &lt;3 cups",
                        "<em>tea</em> catechins",
                        "<em>tea</em> 2",
                        "<em>tea</em> 3",
                    ],
                },
                "fields": {"bm25_score": [11.5], "reranked": [True]},
            },
            {
                "_index": "esrr-v3",
                "_id": "MED-10",
                "_score": 3.1,
                "_source": {
                    "doc_id": "MED-10",
                    "title": "Statins <b>and</b> survival",
                    "abstract": "word " * 100,
                    "journal": "JAMA",
                    "authors": ["Doe J"],
                    "publication_types": ["Journal Article"],
                },
                "fields": {"bm25_score": [9.0], "reranked": [True]},
            },
        ],
    },
    "aggregations": {
        "year": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 0,
            "buckets": [{"key": 2019, "doc_count": 40}, {"key": 2012, "doc_count": 7}],
        },
        "publication_types": {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": 0,
            "buckets": [{"key": "Journal Article", "doc_count": 45}, {"key": "Review", "doc_count": 6}],
        },
    },
    "esrr": {"ranker": "delta-32-lex3 + BM25 guard + candidate feedback"},
}


def test_the_request_body_is_the_contracts_with_filters_only_when_chosen():
    plain = search_body(site_query("green tea", None, None, None, []))
    assert plain == {
        "query": {"bool": {"must": [{"match": {"text": {"query": "green tea"}}}]}},
        "from": 0,
        "size": 10,
        "highlight": {"encoder": "html", "fields": {"title": {"number_of_fragments": 0}, "abstract": {}}},
        "aggs": {
            "year": {"terms": {"field": "year", "size": 50}},
            "publication_types": {"terms": {"field": "publication_types", "size": 20}},
        },
    }
    filtered = search_body(
        site_query("  green   tea ", "3", "2010", "2020", ["Review", "Review", " ", "Clinical Trial"])
    )
    assert filtered["query"]["bool"] == {
        "must": [{"match": {"text": {"query": "green tea"}}}],
        "filter": [
            {"range": {"year": {"gte": 2010, "lte": 2020}}},
            {"terms": {"publication_types": ["Review", "Clinical Trial"]}},
        ],
    }
    assert filtered["from"] == 20 and filtered["size"] == 10
    assert search_body(site_query("tea", None, "", "2001", []))["query"]["bool"]["filter"] == [
        {"range": {"year": {"lte": 2001}}}
    ]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"page": "0"}, "page is 0"),
        ({"page": str(MAX_PAGE + 1)}, f"page is {MAX_PAGE + 1}"),
        ({"page": "two"}, "page is 'two'"),
        ({"year_from": "19x"}, "year from is '19x'"),
        ({"year_from": "2020", "year_to": "2010"}, "put the earlier year first"),
        ({"year_to": "99999"}, "year to is 99999"),
        ({"text": "a" * 501}, "at most 500"),
        ({"types": [f"t{i}" for i in range(21)]}, "at most 20"),
    ],
)
def test_a_field_out_of_range_is_named_with_what_it_takes(fields, named):
    args = {"text": "tea", "page": None, "year_from": None, "year_to": None, "types": [], **fields}
    with pytest.raises(SiteQueryError, match=named):
        site_query(**args)


def test_the_view_shows_what_people_read():
    view = results_view(RESPONSE, SiteQuery("green tea", 2, 2010, None, ("Review",)))
    first, second = view.results
    assert first.url == "https://pubmed.ncbi.nlm.nih.gov/31452104/" and second.url is None  # MED-10 is no PMID
    assert first.authors == "Smith JA, Lee K, Ortiz M, et al." and second.authors == "Doe J"
    assert (first.journal, first.year, first.publication_types) == ("Nutrients", 2019, ("Journal Article", "Review"))
    assert second.year is None and first.reranked
    assert first.title == Markup("<em>Green</em> <em>tea</em> &amp; breast cancer")
    assert first.snippet == Markup(
        "drinking <em>green</em> <em>tea</em> &lt;3 cups … <em>tea</em> catechins … <em>tea</em> 2"
    )  # the first three fragments
    assert second.title == Markup("Statins &lt;b&gt;and&lt;/b&gt; survival")  # no highlight: the escaped title
    assert str(second.snippet).endswith(" …") and len(second.snippet) <= 302
    assert (view.total, view.total_is_lower_bound, view.page, view.last_page, view.first_shown) == (
        500,
        True,
        2,
        50,
        11,
    )
    assert view.ranker == "delta-32-lex3 + BM25 guard + candidate feedback" and view.notes == ()
    assert [(f.value, f.count) for f in view.years] == [("2012", 7), ("2019", 40)]
    assert [(f.value, f.count, f.chosen) for f in view.types] == [("Journal Article", 45, False), ("Review", 6, True)]


def test_a_chosen_type_with_no_documents_left_stays_listed_and_chosen():
    view = results_view(RESPONSE, SiteQuery("tea", 1, None, None, ("Letter",)))
    assert view.types[-1].value == "Letter" and view.types[-1].chosen and view.types[-1].count == 0


def test_skipped_and_fallback_are_notes_that_say_why():
    response = {
        **RESPONSE,
        "esrr": {"ranker": "BM25", "fallback": "no worker answered within 2 s", "skipped": "sort other than _score"},
    }
    notes = results_view(response, SiteQuery("tea")).notes
    assert notes == (
        "Reranking was skipped: sort other than _score",
        "Reranking fell back to the search engine's order: no worker answered within 2 s",
    )


def test_pages_stop_at_the_gateways_window():
    response = {**RESPONSE, "hits": {**RESPONSE["hits"], "total": {"value": 10_000, "relation": "gte"}}}
    assert results_view(response, SiteQuery("tea")).last_page == MAX_PAGE == 100
    empty = {"hits": {"total": {"value": 0, "relation": "eq"}, "hits": []}, "esrr": {"ranker": "BM25"}}
    view = results_view(empty, SiteQuery("tea"))
    assert (view.total, view.last_page, view.results, view.years, view.types) == (0, 1, (), (), ())


@pytest.mark.parametrize(
    ("fragment", "safe"),
    [
        ("<em>tea</em> &amp; &lt;script&gt;", "<em>tea</em> &amp; &lt;script&gt;"),  # escaped by the backend: kept
        ("<em>tea</em> <script>alert(1)</script>", "<em>tea</em> &lt;script&gt;alert(1)&lt;/script&gt;"),  # raw
        ('<em onclick="x">tea</em>', "&lt;em onclick=&#34;x&#34;&gt;tea"),  # only a bare <em> is markup
        ("<em>tea", "<em>tea</em>"),
        ("tea</em> cup", "tea cup"),  # unbalanced tags closed or dropped
    ],
)
def test_a_snippets_only_markup_is_em(fragment, safe):
    assert highlighted(fragment) == Markup(safe)


@pytest.mark.parametrize(
    ("fragment", "shown"),
    [
        (
            "<em>diet</em> <em>and</em> <em>cancer</em>",
            "<em>diet</em> and <em>cancer</em>",
        ),  # a lone stop word: unmarked
        ("Effects <em>of</em> <em>The</em> diet", "Effects of The diet"),
        ("<em>diet and cancer</em>", "<em>diet and cancer</em>"),  # a mark around more than the stop word stays
        ("<em>android</em> <em>andes</em>", "<em>android</em> <em>andes</em>"),  # whole words only
        ("<em>and", "<em>and</em>"),  # unbalanced: closed as before
    ],
)
def test_a_lone_stop_word_is_not_marked(fragment, shown):
    assert highlighted(fragment) == Markup(shown)


@pytest.mark.parametrize(
    ("doc_id", "metadata", "url"),
    [
        ("31452104", None, "https://pubmed.ncbi.nlm.nih.gov/31452104/"),
        ("MED-10", {"url": "http://www.ncbi.nlm.nih.gov/pubmed/25329299"}, "https://pubmed.ncbi.nlm.nih.gov/25329299/"),
        ("MED-11", {"url": "https://pubmed.ncbi.nlm.nih.gov/25329300/"}, "https://pubmed.ncbi.nlm.nih.gov/25329300/"),
        ("MED-12", {"url": "https://example.org/pubmed/1"}, None),  # only PubMed's own address is linked
        ("MED-13", {"url": "javascript:alert(1)//ncbi.nlm.nih.gov/pubmed/1"}, None),
        ("MED-14", {"url": 7}, None),
        ("MED-15", "not an object", None),
        ("MED-16", {}, None),
    ],
)
def test_a_hit_links_pubmed_by_its_pmid_or_its_records_pubmed_address(doc_id, metadata, url):
    assert pubmed_url(doc_id, metadata) == url
    assert result_view({"_id": doc_id, "_source": {"doc_id": doc_id, "metadata": metadata}}).url == url


def test_a_hit_without_metadata_still_shows_its_id_and_title():
    view = result_view({"_id": "7", "_source": {"doc_id": "7", "title": "Bone health"}, "fields": {}})
    assert (view.title, view.url, view.authors, view.journal, view.year, view.snippet, view.reranked) == (
        "Bone health",
        "https://pubmed.ncbi.nlm.nih.gov/7/",
        "",
        "",
        None,
        "",
        False,
    )
    assert author_line([]) == ""


def test_links_keep_the_search_and_its_filters():
    query = SiteQuery("green tea", 3, 2010, None, ("Review", "Letter"))
    assert query.link(4) == {"q": "green tea", "year_from": 2010, "type": ["Review", "Letter"], "page": 4}
    assert "page" not in query.link(1)
