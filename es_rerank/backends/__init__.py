"""Search backends behind one protocol; ``open_backend`` picks one from settings."""

from __future__ import annotations

from es_rerank.backends.base import BackendError, Hit, SearchBackend
from es_rerank.settings import CommonSettings

__all__ = ["BackendError", "Hit", "SearchBackend", "open_backend"]


def open_backend(settings: CommonSettings) -> SearchBackend:
    """The configured backend serving its current index version."""
    if settings.backend == "embedded":
        from es_rerank.backends.embedded import EmbeddedBackend

        return EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
    if settings.backend == "opensearch":
        from es_rerank.backends.opensearch import OpenSearchBackend

        return OpenSearchBackend.from_settings(settings)
    from es_rerank.backends.elasticsearch import ElasticsearchBackend

    return ElasticsearchBackend.from_settings(settings)
