"""Build and replace the Elasticsearch index: versioned indices behind one alias.

Each load creates a new concrete index ``<alias>-<version>`` (mapping ``_meta``
``{"esrr_stats_version": <version>}``) with no replicas and refresh off, bulk-loads it
with ``es_bulk_threads`` ``streaming_bulk`` loops (429s retried with a doubling
wait), saves the term statistics of the same pass under
``<ESRR_HOME>/indexes/elasticsearch/<version>/stats``, restores the replicas and the
refresh interval, refreshes, checks the document count, and only then moves the alias with one atomic ``update_aliases``
call (remove from the old index + add to the new), in the style of
elasticsearch-py's ``examples/dsl/alias_migration.py``. A failed load deletes the
half-built index and its statistics; the alias and the old index keep serving.
Old versions stay until ``delete_old_versions``; ``use_version`` moves the alias back
(or forward) to any version still there.

Statistics are computed in the pass that feeds the bulk loader, with the same code
as the embedded build (``index_setup.ingest`` tokenizes in worker processes,
``es_rerank.stats_writer.StatsWriter`` writes the statistics batch by batch), so
the corpus is read once and never held in memory; the ids stored in ES and those
in the statistics are the same arrays.

The analyzer
------------
``title`` and ``abstract`` are analysed by ``esrr_text``: a ``pattern`` tokenizer
whose pattern *matches tokens* (``group: 0``) and mirrors the regular expression of
``es_rerank.text.tokenize`` alternative by alternative (dollar amount, dotted
abbreviation, number / range / percentage, hyphenated compound, word), then
token filters that drop spaces (``$ 20`` -> ``$20``, ``50 %`` -> ``50%``) and a
trailing possessive ``'s``, then ``lowercase``. Our tokenizer splits plain English
compounds (``well-known`` -> ``well``, ``known``) but keeps entity-like ones
(``IL-6``, ``TNF-α``, ``5-HT2A``); the pattern does the same with a look-ahead that
accepts a compound only when one of its parts is not a plain English word. Ranges
of numbers (``18-65``) become one token per number, as in ours.

What differs (a pattern tokenizer can only emit substrings of the text):
- ``1-2%`` gives ``1``, ``2%`` (ours: ``1%``, ``2%``); the percent sign cannot be
  copied onto the first number of a range. This is most of the difference.
- Lower-casing is Lucene's per code point, not Python's (``İ`` -> ``i``, ours ``i̇``).
- Garbled numbers (``0.14-0.0.98``) and a plain compound directly followed by a
  dotted abbreviation split differently.
- noida-db only: its ``\\p{N}`` misses ``No`` characters (``½``, ``²``, ``₂``).
Measured on all 7,266 NFCorpus titles and abstracts: 98.5 % analyse exactly like
``tokenize`` with Java's regex engine (the pattern run through
``java.util.regex`` with the same filters), 98.2 % in noida-db; the test suite
checks a sample, so a change to ``es_rerank/text.py`` that this pattern does not
follow fails a test (update ``TOKEN_PATTERN`` then).

The differences touch only which documents BM25 retrieves; every number the model
sees (DocTerms, Lex features) comes from our statistics. Exact agreement would need
pre-tokenized text in ES (as the embedded backend does: whitespace analyzer, query
tokenized in Python); the analyzer keeps the index usable with natural-language
queries from any ES client (Kibana, curl), at the price of the differences above.

noida-db (the test server) notes: it accepts all of the above (pattern tokenizer
with look-behind, ``pattern_replace``, per-field BM25 similarities, ``_meta``,
``index: false`` integers, atomic ``update_aliases``, write blocks) but ignores
custom k1/b (always Lucene's 1.2/0.75), rejects ``\\p{Nl}``/``\\p{No}`` in patterns
(so none are used), and lets ``index: false`` fields be queried where real ES
refuses. ``combined_fields`` works in noida-db but not with per-field similarities
in real ES, hence the ``bool.should`` query of the backend.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from elasticsearch import ApiError, Elasticsearch, NotFoundError, TransportError
from elasticsearch.helpers import BulkIndexError, streaming_bulk
from tqdm import tqdm

from es_rerank.backends.analysis import ANALYZER, TOKEN_PATTERN, analysis_settings
from es_rerank.backends.base import BackendError
from es_rerank.backends.es_client import translate_errors
from es_rerank.backends.es_layout import (
    BUILD_META_KEY,
    META_KEY,
    TERM_FIELDS,
    TEXT_FIELD,
    alias_targets,
    index_meta,
    served_index,
    stats_dir,
    stats_root,
)
from es_rerank.stats import NO_DOCUMENTS, CorpusStats, Document, StatsError, saved_build_id
from es_rerank.stats_writer import StatsWriter
from es_rerank.versions import VersionNameError, check_version, is_locked, lock_folder, new_version
from index_setup.ingest import tokenized_batches

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

log = logging.getLogger(__name__)


def index_settings(settings: CommonSettings) -> dict:
    """Index settings while loading: shards, no replicas, no refresh, per-field BM25 similarities, the analyzer.

    A load writes each document once, to the primaries only, with no refresh making
    segments meanwhile; ``load_index`` restores ``serving_settings`` before the swap.
    """
    return {
        "number_of_shards": settings.es_shards,
        "number_of_replicas": 0,
        "refresh_interval": "-1",
        "similarity": {
            "esrr_bm25_title": {"type": "BM25", "k1": settings.bm25_title_k1, "b": settings.bm25_title_b},
            "esrr_bm25_abstract": {"type": "BM25", "k1": settings.bm25_k1, "b": settings.bm25_b},
        },
        "analysis": analysis_settings(),
    }


def serving_settings(settings: CommonSettings) -> dict:
    """The settings a loaded index serves with: the configured replicas, the cluster's default refresh."""
    return {"index": {"number_of_replicas": settings.es_replicas, "refresh_interval": None}}


def index_mappings(version: str, build_id: str | None = None) -> dict:
    """Strict mapping: BM25 text fields, the metadata, stored-only term ids; _meta names version and build.

    ``text`` is title and abstract as one field (what the embedded index searches), so that a
    query on ``text`` with AND, minimum_should_match or a phrase means the same on both
    backends; it is indexed only (left out of ``_source``). The metadata fields are those of
    the issue-26 contract: keywords to filter and aggregate, ``year`` an integer, the BEIR
    ``metadata`` object kept as given, not indexed.
    """
    stored_ids = {"type": "integer", "index": False, "doc_values": False}
    return {
        "dynamic": "strict",
        "_meta": {META_KEY: version, **({BUILD_META_KEY: build_id} if build_id else {})},
        "_source": {"excludes": [TEXT_FIELD]},
        "properties": {
            "doc_id": {"type": "keyword"},
            "title": {"type": "text", "analyzer": ANALYZER, "similarity": "esrr_bm25_title"},
            "abstract": {"type": "text", "analyzer": ANALYZER, "similarity": "esrr_bm25_abstract"},
            TEXT_FIELD: {"type": "text", "analyzer": ANALYZER, "similarity": "esrr_bm25_abstract"},
            "journal": {"type": "keyword"},
            "year": {"type": "integer"},
            "authors": {"type": "keyword"},
            "mesh": {"type": "keyword"},
            "publication_types": {"type": "keyword"},
            "doi": {"type": "keyword"},
            "metadata": {"type": "object", "enabled": False},
            **{name: stored_ids for name in TERM_FIELDS},
        },
    }


def index_name(alias: str, version: str) -> str:
    """The concrete index of one version."""
    return f"{alias}-{version}"


@dataclass(frozen=True)
class LoadResult:
    """What a load produced: the new serving index and what is still around."""

    alias: str
    index: str
    version: str
    n_docs: int
    n_terms: int
    stats_dir: Path
    previous: tuple[str, ...]  # indices the alias pointed at before; kept until deleted
    seconds: float

    def __str__(self) -> str:
        moved = f"moved from {', '.join(self.previous)}" if self.previous else "created"
        return (
            f"{self.index} (version {self.version}): {self.n_docs} documents, {self.n_terms} terms "
            f"in {self.seconds:.1f} s; alias {self.alias} {moved}; statistics at {self.stats_dir}"
        )


@dataclass(frozen=True)
class IndexVersion:
    """One esrr-built concrete index behind (or formerly behind) an alias."""

    version: str
    index: str
    created_ms: int
    serving: bool


def _actions(documents: Iterable[Document], index: str, stats: StatsWriter) -> Iterator[dict]:
    """Bulk actions, tokenizing each document once and writing its statistics."""
    for raw, batch in tokenized_batches(documents):
        for (doc_id, title, abstract), terms, source in zip(raw, stats.add(batch).doc_terms(), batch.sources):
            yield {
                "_index": index,
                "_id": doc_id,
                "_source": {**source, TEXT_FIELD: f"{title}\n{abstract}", **terms.as_json()},
            }


class _SharedActions:
    """One stream of bulk actions read by several threads: one ``next`` at a time (the stream tokenizes and
    writes the statistics in corpus order); ``close`` ends it for every reader."""

    def __init__(self, actions: Iterable[dict]) -> None:
        self._actions = iter(actions)
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> _SharedActions:
        return self

    def __next__(self) -> dict:
        with self._lock:
            if self._closed:
                raise StopIteration
            return next(self._actions)

    def close(self) -> None:
        """Give every reader StopIteration from its next ``next`` on."""
        self._closed = True

    def release(self) -> None:
        """Close the underlying stream (a generator's ``finally`` runs: tokenizing processes stop); call it
        once no thread reads any more."""
        with self._lock:
            self._closed = True
            close = getattr(self._actions, "close", None)
            if close is not None:
                close()


def _still_busy(errors: Sequence[dict]) -> bool:
    """Whether a failed bulk item was refused with 429 (a full write queue) after its retries."""
    return any(
        isinstance(item, dict)
        and any(isinstance(result, dict) and result.get("status") == 429 for result in item.values())
        for item in errors
    )


def bulk_load(
    client: Elasticsearch,
    actions: Iterable[dict],
    settings: CommonSettings,
    on_indexed: Callable[[], object] = lambda: None,
) -> None:
    """Send ``actions`` with ``settings.es_bulk_threads`` ``streaming_bulk`` loops over one shared stream.

    Each loop has one ``_bulk`` request in flight; documents the cluster rejects with
    429 (its write queue is full) are sent again after a wait that starts at
    ``es_bulk_initial_backoff_s`` and doubles up to ``es_bulk_max_backoff_s``, at most
    ``es_bulk_max_retries`` times, so a busy cluster slows the load instead of failing
    it. (``helpers.parallel_bulk`` sends chunks from a thread pool too but retries
    nothing.) The first error of any loop (``BulkIndexError``, an API error, or one
    raised by ``actions`` itself) stops the others after their current request and is
    raised here. ``on_indexed`` is called once a document (from any thread).
    """
    shared = _SharedActions(actions)
    # A request that timed out is sent again: documents carry their _id, so a retry cannot duplicate.
    # A 429 goes up to the helper, which waits before sending again (the transport would resend at once).
    retrying = client.options(retry_on_timeout=True, retry_on_status=(502, 503, 504))
    # The OpenSearch client brings opensearch-py's helper (the same retries); the official client takes this one.
    bulk = getattr(retrying, "streaming_bulk", None) or partial(streaming_bulk, retrying)
    errors: list[BaseException] = []

    def send() -> None:
        try:
            # raise_on_error=False: with it on, the helper raises at a chunk's first 429 instead of sending
            # the rejected documents again (elasticsearch-py 8.19); failures that stay failures come out here.
            for ok, item in bulk(
                shared,
                chunk_size=settings.es_bulk_chunk_size,
                max_retries=settings.es_bulk_max_retries,
                initial_backoff=settings.es_bulk_initial_backoff_s,
                max_backoff=settings.es_bulk_max_backoff_s,
                raise_on_error=False,
            ):
                if not ok:
                    raise BulkIndexError("a document failed to index", [item])
                on_indexed()
        except BaseException as error:
            errors.append(error)
            shared.close()

    threads = [
        threading.Thread(target=send, name=f"esrr-bulk-{i}", daemon=True) for i in range(settings.es_bulk_threads - 1)
    ]
    try:
        for thread in threads:
            thread.start()
        send()  # this thread is one of the loops
        for thread in threads:
            thread.join()
    finally:  # Ctrl-C here: the other loops stop after their current request
        shared.close()
        for thread in threads:
            thread.join()
        shared.release()
    if errors:
        interrupt = [e for e in errors if not isinstance(e, Exception)]  # Ctrl-C wins over the errors it caused
        raise (interrupt or [e for e in errors if isinstance(e, BulkIndexError)] or errors)[0]


def _serve_settings(client: Elasticsearch, index: str, settings: CommonSettings) -> None:
    """Restore replicas and refresh on a loaded ``index``, refresh it, and wait (bounded) for its replicas."""
    client.indices.put_settings(index=index, settings=serving_settings(settings))
    client.indices.refresh(index=index)
    if settings.es_replicas and settings.es_replica_wait_s:
        # A wait that times out is answered 408 with the health in the body. Milliseconds: Elasticsearch
        # refuses fractional time values ("0.2s").
        wait_ms = max(1, round(settings.es_replica_wait_s * 1000))
        health = client.options(ignore_status=408).cluster.health(
            index=index, wait_for_status="green", timeout=f"{wait_ms}ms"
        )
        if health.get("timed_out"):  # the primaries serve; the replicas follow when the cluster can place them
            log.warning(
                "the replicas of %s are not all allocated after %g s (status %s): the alias moves anyway; "
                "a single-node cluster needs ESRR_ES_REPLICAS=0",
                index,
                settings.es_replica_wait_s,
                health.get("status"),
            )


def load_index(
    client: Elasticsearch,
    documents: Iterable[Document],
    settings: CommonSettings,
    version: str | None = None,
    progress: bool = True,
    total: int | None = None,
) -> LoadResult:
    """Load ``documents`` into a new versioned index and point ``settings.es_alias`` at it.

    The alias moves (one atomic ``update_aliases``) only after the bulk load, the
    statistics, a refresh and a document-count check all succeeded. On any failure,
    including an exception from ``documents`` itself, the new index and its
    statistics are deleted and the error re-raised (Elasticsearch errors as
    ``BackendError``); the alias keeps serving the old index.
    """
    alias = settings.es_alias
    version = version or new_version()
    check_version(version)
    if version != version.lower():  # Elasticsearch index names are lower case
        raise VersionNameError(
            f"version {version!r} is not usable in an index name; use lower case (or leave it out for a timestamp)"
        )
    index = index_name(alias, version)
    root = stats_root(settings)
    version_dir = root / version
    if total is None and isinstance(documents, Sequence):
        total = len(documents)
    started = time.perf_counter()
    build_id = uuid.uuid4().hex
    with translate_errors(client):
        previous = alias_targets(client, alias)  # also refuses an alias name taken by an index
        if client.indices.exists(index=index):
            raise BackendError(
                f"index {index!r} already exists; pick another --version, or delete it "
                f"(`esrr index prune`, or DELETE /{index} if it is not a version esrr lists)"
            )
    # Claimed before the index is created: a load that fails deletes only a folder it made,
    # never the statistics of another alias that shares this ESRR_HOME and the version name.
    # Its lock, held until the load ends, keeps `esrr index prune` off the index being loaded.
    try:
        version_dir.mkdir(parents=True)
    except FileExistsError:
        raise BackendError(
            f"statistics directory {version_dir} already exists: another load in this "
            f"ESRR_HOME (of this alias or another) is building or has built version {version!r}, "
            "or a load of it was killed (`esrr index versions` says which); pick another "
            "--version, or prune the interrupted load"
        ) from None
    lock = lock_folder(version_dir)
    try:
        with translate_errors(client):
            client.indices.create(
                index=index, settings=index_settings(settings), mappings=index_mappings(version, build_id)
            )
    except BaseException:  # an index of that name made meanwhile is not this load's to delete
        version_dir.rmdir()
        os.close(lock)
        raise
    stats: StatsWriter | None = None
    try:
        stats = StatsWriter(stats_dir(root, version), version, build_id=build_id)
        with (
            translate_errors(client),
            tqdm(total=total, unit="doc", desc=f"loading {index}", disable=not progress) as bar,
        ):
            bulk_load(client, _actions(documents, index, stats), settings, lambda: bar.update(1))
        if not stats.n_docs:  # an empty index must never replace the served one
            raise ValueError(NO_DOCUMENTS)
        stats.finish()  # the statistics' files are complete from here (meta.json last)
        with translate_errors(client):
            _serve_settings(client, index, settings)
            count = client.count(index=index)["count"]
            if count != stats.n_docs:
                raise BackendError(
                    f"index {index!r} holds {count} documents after the load, expected "
                    f"{stats.n_docs}; check the cluster logs and run the build again"
                )
            if _build_of(client, index) != build_id:  # deleted under the load and made anew by a bulk request
                raise BackendError(
                    f"index {index!r} was deleted while it was loading (another admin's prune or "
                    "DELETE); run the build again"
                )
            previous = _move_alias(client, alias, index)
    except BulkIndexError as exc:
        if stats is not None:
            stats.abort()
        _discard(client, index, version_dir)
        first = str(exc.errors[0] if exc.errors else {})[:500]
        if _still_busy(exc.errors):
            fix = (
                f"the cluster's write queue stayed full through ESRR_ES_BULK_MAX_RETRIES="
                f"{settings.es_bulk_max_retries} retries (waits up to ESRR_ES_BULK_MAX_BACKOFF_S="
                f"{settings.es_bulk_max_backoff_s:g} s); raise those, or lower ESRR_ES_BULK_THREADS="
                f"{settings.es_bulk_threads}, and run the build again"
            )
        else:
            fix = "Fix the documents or the cluster (disk watermarks, write blocks) and run the build again"
        raise BackendError(
            f"documents were rejected while loading {index!r} (first: {first}); "
            f"the alias {alias!r} still serves {previous or 'nothing'}. {fix}"
        ) from exc
    except BaseException:
        if stats is not None:
            stats.abort()
        _discard(client, index, version_dir)
        raise
    finally:
        os.close(lock)
    return LoadResult(
        alias,
        index,
        version,
        stats.n_docs,
        stats.n_terms,
        stats_dir(root, version),
        tuple(previous),
        time.perf_counter() - started,
    )


def _build_of(client: Elasticsearch, index: str) -> str | None:
    """The build id in ``index``'s mapping ``_meta``; None when it has none (not made by a load)."""
    try:
        return index_meta(client, index).build_id
    except BackendError:
        return None


def _move_alias(client: Elasticsearch, alias: str, index: str) -> list[str]:
    """Point ``alias`` at ``index`` alone, in one atomic ``update_aliases``; returns the indices it left."""
    previous = alias_targets(client, alias)  # read now: another load may have moved it meanwhile
    actions = [{"remove": {"index": old, "alias": alias}} for old in previous if old != index]
    client.indices.update_aliases(actions=[*actions, {"add": {"index": index, "alias": alias}}])
    return previous


def _discard(client: Elasticsearch, index: str, version_dir: Path) -> None:
    """Best-effort removal of a half-built version (the original error matters more)."""
    shutil.rmtree(version_dir, ignore_errors=True)
    try:
        client.options(ignore_status=404).indices.delete(index=index)
    except (ApiError, TransportError) as error:  # cleanup must not mask the load error
        log.warning("could not delete the half-built index %s (%s); delete it by hand", index, error)


def list_indices(client: Elasticsearch, alias: str) -> list[IndexVersion]:
    """The esrr-built indices of ``alias`` with their details, oldest first."""
    with translate_errors(client):
        indices = client.indices.get(index=f"{alias}-*").body
    versions = []
    for name, info in indices.items():
        version = ((info.get("mappings") or {}).get("_meta") or {}).get(META_KEY)
        if not version or name != index_name(alias, str(version)):
            continue  # another alias's index that happens to share the prefix
        created = int(info.get("settings", {}).get("index", {}).get("creation_date", 0))
        versions.append(IndexVersion(str(version), name, created, alias in (info.get("aliases") or {})))
    return sorted(versions, key=lambda v: (v.created_ms, v.version))


def list_versions(client: Elasticsearch, alias: str) -> list[str]:
    """Versions of ``alias`` that exist in the cluster, oldest first (as the embedded index)."""
    return [v.version for v in list_indices(client, alias)]


def current_version(client: Elasticsearch, alias: str) -> str | None:
    """The version the alias serves, or None when there is no alias yet."""
    served = served_index(client, alias)
    return served.version if served is not None else None


def delete_old_versions(
    client: Elasticsearch, alias: str, keep: int | None = None, settings: CommonSettings | None = None
) -> list[str]:
    """Delete all but the newest ``keep`` versions (0: all), never the serving one; returns the deleted.

    With ``settings``, loads killed outright go too, whatever ``keep`` says, and loads
    still running are left alone; neither counts among the ``keep``.

    ``keep`` defaults to ``settings.es_keep_versions`` (else 2). With ``settings`` the
    statistics directories of the deleted versions go too.
    """
    if keep is None:
        keep = settings.es_keep_versions if settings is not None else 2
    if keep < 0:
        raise ValueError(f"keep={keep}: the number of versions to keep must be 0 or more")
    versions = list_indices(client, alias)
    unfinished = unfinished_loads(versions, settings) if settings is not None else {}
    abandoned = [v for v in versions if unfinished.get(v.version) and not v.serving]
    versions = [v for v in versions if v.version not in unfinished]
    try:  # its version, whatever the index is called (a restored copy)
        served = served_index(client, alias)
    except BackendError:  # an alias on two indices, or on one esrr did not build: those stay (v.serving)
        served = None
    older = versions[:-keep] if keep > 0 else versions  # the serving one stays whatever keep says
    doomed = abandoned + [v for v in older if not v.serving and (served is None or v.version != served.version)]
    with translate_errors(client):
        for v in doomed:
            build = _build_of(client, v.index)
            try:
                client.indices.delete(index=v.index)
            except NotFoundError:
                pass
            statistics = stats_root(settings) / v.version if settings is not None else None
            # Only the index's own: another alias (another ESRR_HOME's load) may hold that version name here.
            if statistics is not None and (build is None or saved_build_id(statistics / "stats") in (None, build)):
                shutil.rmtree(statistics, ignore_errors=True)
    return [v.version for v in doomed]


def unfinished_loads(versions: Sequence[IndexVersion], settings: CommonSettings) -> dict[str, bool]:
    """The versions whose load has not saved its statistics in this ESRR_HOME, each with whether it was
    abandoned (killed outright: its folder's lock is free) rather than still running."""
    unfinished = {}
    for v in versions:
        folder = stats_root(settings) / v.version
        if folder.is_dir() and not (folder / "stats" / "meta.json").is_file():
            try:
                unfinished[v.version] = not is_locked(folder)
            except FileNotFoundError:  # its load failed and cleaned up just now
                continue
    return unfinished


def use_version(client: Elasticsearch, settings: CommonSettings, version: str) -> str:
    """Point the alias at an existing version (roll back or forward); returns its index.

    The index must carry the version in its ``_meta`` and its statistics must be
    readable, so the backend can serve it; the move is one atomic ``update_aliases``.
    """
    alias, index = settings.es_alias, index_name(settings.es_alias, version)
    with translate_errors(client):
        if not client.indices.exists(index=index):
            raise BackendError(
                f"no index {index!r} for version {version!r}; existing versions: {list_versions(client, alias)}"
            )
        recorded = index_meta(client, index)
        if recorded.version != version:
            raise BackendError(f"index {index!r} records another version in its _meta; rebuild it")
        try:
            stats = CorpusStats.load(stats_dir(stats_root(settings), version), check_ids=True)
        except StatsError as exc:
            raise BackendError(f"version {version!r} cannot be served: {exc}") from exc
        if recorded.build_id not in (None, stats.build_id):
            raise BackendError(
                f"index {index!r} and the statistics of version {version!r} come from different "
                "loads (another alias sharing this ESRR_HOME, or a restored snapshot); rebuild "
                "with another --version"
            )
        _move_alias(client, alias, index)
    return index


__all__ = [
    "ANALYZER",
    "TOKEN_PATTERN",
    "IndexVersion",
    "LoadResult",
    "analysis_settings",
    "bulk_load",
    "serving_settings",
    "current_version",
    "delete_old_versions",
    "index_mappings",
    "index_name",
    "index_settings",
    "list_indices",
    "list_versions",
    "load_index",
    "unfinished_loads",
    "use_version",
]
