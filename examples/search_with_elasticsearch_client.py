"""Search a running es-rerank gateway with the official Elasticsearch client, unchanged.

    esrr serve --port 9200 &                     # the gateway, on the embedded index of ESRR_HOME
    python examples/search_with_elasticsearch_client.py http://127.0.0.1:9200 "vitamin d and bone"

Prints the served index, then one line per hit: rank, score, whether the model or a vote moved it
(``fields.reranked``), the document id and its title.
"""

from __future__ import annotations

import sys

from elasticsearch import Elasticsearch


def main(url: str, query: str, size: int = 10) -> None:
    """Print the gateway's top ``size`` hits for ``query``."""
    with Elasticsearch(url, request_timeout=30) as client:
        index = client.info()["esrr"]["index"]
        response = client.search(index=index, query={"match": {"text": query}}, size=size)
        print(f"index {index}: {response['hits']['total']['value']} hits, ranker {response['esrr']['ranker']}")
        for rank, hit in enumerate(response["hits"]["hits"], start=1):
            reranked = "reranked" if hit["fields"]["reranked"] == [True] else "bm25"
            print(f"{rank:>3} {hit['_score']:8.3f} {reranked:<8} {hit['_id']:<12} {hit['_source']['title']}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: python {sys.argv[0]} GATEWAY_URL QUERY")
    main(sys.argv[1], sys.argv[2])
