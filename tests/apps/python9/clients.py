"""The 9.x Python client and its elasticsearch.dsl used as an application uses them, against the gateway at URL; what
each returned is printed as one JSON line for tests/apps/test_python_client_9.py to check.

Run by the interpreter of tests/apps/python9/.venv (requirements.txt), apart from the core's 8.x client:

    python clients.py scan URL QUERY     helpers.scan in index order and preserving the score order
    python clients.py dsl URL QUERY      a FacetedSearch with a filter, Search.sort(), Search.scan(), Document.search()
"""

from __future__ import annotations

import json
import sys

from elasticsearch import Elasticsearch, helpers
from elasticsearch.dsl import Document, FacetedSearch, HistogramFacet, Integer, Keyword, Search, TermsFacet, Text

INDEX = "esrr-docs"


def scan(es: Elasticsearch, query: str) -> dict:
    """``helpers.scan`` both ways, 20 hits a page."""
    body = {"query": {"match": {"text": query}}}
    in_order = [hit["_id"] for hit in helpers.scan(es, index=INDEX, query=body, size=20)]
    by_score = list(helpers.scan(es, index=INDEX, query=body, size=20, preserve_order=True))
    return {
        "count": es.count(index=INDEX, query=body["query"])["count"],
        "in_order": in_order,
        "by_score": [hit["_id"] for hit in by_score],
        "scores": [hit["_score"] for hit in by_score],
    }


class PaperSearch(FacetedSearch):
    index = INDEX
    fields = ["title", "abstract"]
    facets = {
        "publication_types": TermsFacet(field="publication_types"),
        "journal": TermsFacet(field="journal"),
        "year": HistogramFacet(field="year", interval=5),
    }


class Paper(Document):
    """The served record as an application declares it (9.x's ``Document.search`` sends ``exclude_vectors``)."""

    doc_id = Keyword()
    title = Text()
    abstract = Text()
    journal = Keyword()
    year = Integer()

    class Index:
        name = INDEX


def dsl(es: Elasticsearch, query: str) -> dict:
    """A faceted search with a filter, newest first, a scan and a ``Document`` search."""
    faceted = type("GatewayPaperSearch", (PaperSearch,), {"using": es})(query, filters={"publication_types": "Review"})
    response = faceted.execute()
    search = Search(using=es, index=INDEX).query("match", text=query)
    newest = search.sort("-year").extra(size=30).execute()
    papers = Paper.search(using=es).query("match", text=query).execute()
    return {
        "faceted": {
            "ids": [hit.meta.id for hit in response],
            "total": response.hits.total.value,
            "esrr": response.esrr.to_dict(),
            "facets": {name: [list(bucket) for bucket in response.facets[name]] for name in PaperSearch.facets},
        },
        "newest": {
            "ids": [hit.meta.id for hit in newest],
            "years": [hit.year for hit in newest],
            "sort": [list(hit.meta.sort) for hit in newest],
            "esrr": newest.esrr.to_dict(),
        },
        "scan": [hit.meta.id for hit in search.scan()],
        "count": search.count(),
        "papers": [{"id": paper.meta.id, "title": paper.title, "esrr": papers.esrr.to_dict()} for paper in papers],
    }


if __name__ == "__main__":
    scenario, url, text = sys.argv[1:4]
    client = Elasticsearch(url, request_timeout=60)
    print(json.dumps({"scan": scan, "dsl": dsl}[scenario](client, text)))
