"""What esrr keeps in a cluster: an alias over versioned concrete indices whose mapping ``_meta`` names the
statistics of the same load (under ``ESRR_HOME``), and the fields it adds to each document for itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from elasticsearch import Elasticsearch

from es_rerank.backends.base import BackendError
from es_rerank.backends.es_client import (
    NOT_ELASTICSEARCH_FIX,
    cluster_url,
    not_elasticsearch,
    product,
    translate_errors,
)

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

META_KEY = "esrr_stats_version"
BUILD_META_KEY = "esrr_stats_build"  # which build of the version: a pruned name can be built again
TERM_FIELDS = ("title_ids", "abstract_ids", "first_ids")  # each document's precomputed ids, stored, not indexed
TEXT_FIELD = "text"  # title and abstract as one field, indexed only
INTERNAL_FIELDS = [TEXT_FIELD, *TERM_FIELDS]  # never shown in a hit's _source
BUILD_HINT = "build the index first: esrr index build --backend elasticsearch"


def stats_root(settings: CommonSettings) -> Path:
    """Directory holding one ``<version>/stats`` directory per Elasticsearch index version."""
    return settings.indexes_dir / "elasticsearch"


def stats_dir(root: Path, version: str) -> Path:
    """Statistics directory of one index version under ``root`` (see ``stats_root``)."""
    return root / version / "stats"


def alias_targets(client: Elasticsearch, alias: str) -> list[str]:
    """Concrete indices behind ``alias`` (empty when it does not exist).

    Raises ``BackendError`` when ``alias`` names a concrete index instead of an alias.
    """
    found = client.indices.exists_alias(name=alias)
    if product(client) == "Elasticsearch" and not_elasticsearch(found.meta.status, found.meta.headers):
        raise BackendError(f"{cluster_url(client)} answered HTTP {found.meta.status}, but {NOT_ELASTICSEARCH_FIX}")
    if found:
        return sorted(client.indices.get_alias(name=alias).body)
    if client.indices.exists(index=alias):
        raise BackendError(
            f"{alias!r} at {cluster_url(client)} is a concrete index, not an alias; esrr serves "
            f"versioned indices through an alias. Delete that index (DELETE /{alias}) and rebuild, "
            "or set ESRR_ES_ALIAS to another name"
        )
    return []


class IndexMeta(NamedTuple):
    """The statistics version and build that a concrete index's mapping ``_meta`` records."""

    version: str
    build_id: str | None  # None: built before build ids were recorded


@dataclass(frozen=True)
class ServedIndex:
    """The concrete index an alias names, with the statistics version and build its ``_meta`` records."""

    index: str
    version: str
    build_id: str | None


def index_meta(client: Elasticsearch, index: str) -> IndexMeta:
    """The statistics version and build recorded in a concrete index's mapping ``_meta``."""
    mapping = client.indices.get_mapping(index=index).body[index]["mappings"]
    meta = mapping.get("_meta") or {}
    version = meta.get(META_KEY)
    if not version:
        raise BackendError(
            f"index {index!r} has no {META_KEY!r} in its mapping _meta, so it was not "
            f"built by esrr and has no statistics; {BUILD_HINT}"
        )
    build_id = meta.get(BUILD_META_KEY)
    return IndexMeta(str(version), str(build_id) if build_id else None)


def served_index(client: Elasticsearch, alias: str) -> ServedIndex | None:
    """The concrete index that ``alias`` serves, with its statistics version and build; None when no alias yet."""
    with translate_errors(client):
        targets = alias_targets(client, alias)
        if not targets:
            return None
        if len(targets) > 1:
            raise BackendError(
                f"alias {alias!r} points at {len(targets)} indices {targets}; it must point "
                "at one: rebuild the index (esrr index build --backend elasticsearch) to "
                "repair it"
            )
        return ServedIndex(targets[0], *index_meta(client, targets[0]))
