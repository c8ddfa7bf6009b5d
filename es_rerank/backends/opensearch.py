"""The OpenSearch backend (``ESRR_BACKEND=opensearch``): the Elasticsearch backend on an ``OpenSearchClient``.

Everything but the client is ``elasticsearch.py``'s: OpenSearch answers the calls the
backend makes as Elasticsearch does; ``opensearch_client.py`` says what it translates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_layout import stats_root
from es_rerank.backends.opensearch_client import NotOpenSearch, OpenSearchClient, connect_opensearch

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings


class OpenSearchBackend(ElasticsearchBackend):
    """BM25 over title+abstract from OpenSearch: the Elasticsearch backend on an ``OpenSearchClient``."""

    engine = "opensearch"

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> OpenSearchBackend:
        """Connect to the OpenSearch cluster at ``ESRR_ES_URL`` and serve ``ESRR_ES_ALIAS``."""
        client = connect_opensearch(settings)  # the Elasticsearch client's shape, see its docstring
        return cls(client, settings.es_alias, stats_root(settings))  # type: ignore[arg-type]


__all__ = ["NotOpenSearch", "OpenSearchBackend", "OpenSearchClient", "connect_opensearch"]
