"""The Elasticsearch backend: BM25 top-k from an ES 8 alias, with each hit's precomputed data.

It also serves OpenSearch (``ESRR_BACKEND=opensearch``): ``connect`` then gives opensearch-py in
the official client's shape (``opensearch_client.py``), and ``product`` names the engine in messages.

Layout (written by ``index_setup/es_index.py``): the alias (``ESRR_ES_ALIAS``) points
at one concrete index ``<alias>-<version>`` whose mapping ``_meta`` records
``{"esrr_stats_version": <version>}``; the term statistics of that load live in
``<ESRR_HOME>/indexes/elasticsearch/<version>/stats``.

Hits and statistics always agree: the backend resolves alias -> concrete index ->
``_meta`` version -> statistics once, then searches that *concrete* index, not the
alias. A reindex therefore never mixes new hits with old statistics; the backend
follows the alias when ``reload()`` is called, or by itself as soon as the index it
serves is deleted (``delete_old_versions``).

Query: ``bool.should`` of one ``match`` on ``title`` and one on ``abstract``, so a
document's score is BM25(title) + BM25(abstract), each field with its own similarity
(title k1=2.0 b=0.75 as in the paper, abstract k1=1.2 b=0.75). ``combined_fields``
(BM25F) was rejected: Lucene's CombinedFieldQuery does not support per-field
similarities, so it would throw away the title parameters. The query text goes to
ES as is and is analysed by the index's analyzer (an emulation of
``es_rerank.text.tokenize``, see ``index_setup/es_index.py`` for what differs).
Sort: ``_score`` desc, then ``doc_id`` (keyword) asc, so ties are deterministic.

Search bodies (``prepare`` / ``first_stage`` / ``page``) pass through: the application's
query, ``post_filter``, ``aggs``, ``track_total_hits`` and the rest go to Elasticsearch as
the first stage (size = the window, from 0, the same tie order, only ``doc_id`` and
``title`` fetched), and a second request fetches the page's ``_source``, ``highlight``
and ``fields`` for the hits shown only (the query again, restricted to their ids), as
Elasticsearch's own fetch phase reads them for the page only. One rewrite gives the query
above: a ``match`` on ``text`` without operator or minimum_should_match (any word, the
keyword search, what a shell's query text asks: ``text_body``) is the ``bool.should`` of
``title`` and ``abstract``, which matches
the same documents as the ``text`` field; every other clause on ``text`` searches that
field (title and abstract as one, as in the embedded index), so AND, minimum_should_match
and phrases mean the same on both backends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from elasticsearch import (
    ApiError,
    BadRequestError,
    ConnectionTimeout,
    Elasticsearch,
    NotFoundError,
    SSLError,
    TransportError,
    UnsupportedProductError,
)
from elasticsearch import ConnectionError as ESConnectionError

from es_rerank.backends.answer_budget import HIT_ENVELOPE_BYTES, AnswerBudget, AnswerLimits
from es_rerank.backends.base import BackendError, FirstStage, Hit, QueryRefused, check_k
from es_rerank.backends.es_server import ServerTooOld, VersionedTransport
from es_rerank.stats import CorpusStats, StatsError

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

T = TypeVar("T")

META_KEY = "esrr_stats_version"
BUILD_META_KEY = "esrr_stats_build"  # which build of the version: a pruned name can be built again
# A hit's precomputed data comes from the served statistics, the same ids the load stored in each
# document (one load writes both): fetching those made a top-500 response 5.7 times larger.
HIT_FIELDS = ["doc_id", "title"]
TERM_FIELDS = ("title_ids", "abstract_ids", "first_ids")  # each document's precomputed ids, stored, not indexed
TEXT_FIELD = "text"  # title and abstract as one field, indexed only
INTERNAL_FIELDS = [TEXT_FIELD, *TERM_FIELDS]  # never shown in a hit's _source
PAGE_KEYS = (
    "highlight",
    "_source",
    "fields",
    "docvalue_fields",
    "stored_fields",
    "script_fields",
    "explain",
    "version",
    "seq_no_primary_term",
)  # what the fetch of the page reads
BUILD_HINT = "build the index first: esrr index build --backend elasticsearch"
SEARCH_CONTEXT_CALLS = ("scroll", "clear_scroll", "open_point_in_time", "close_point_in_time")


def stats_root(settings: CommonSettings) -> Path:
    """Directory holding one ``<version>/stats`` directory per Elasticsearch index version."""
    return settings.indexes_dir / "elasticsearch"


def stats_dir(root: Path, version: str) -> Path:
    """Statistics directory of one index version under ``root`` (see ``stats_root``)."""
    return root / version / "stats"


def connect(settings: CommonSettings) -> Elasticsearch:
    """A client for ``ESRR_ES_URL`` with the configured timeout, API key and CA certificates: the official
    Elasticsearch client, or for ``ESRR_BACKEND=opensearch`` opensearch-py in its shape (``opensearch_client.py``)."""
    if settings.backend == "opensearch":
        from es_rerank.backends.opensearch_client import connect_opensearch

        return connect_opensearch(settings)  # type: ignore[return-value]  # the same calls, see its docstring
    security: dict[str, Any] = {}  # api_key: the encoded key or an (id, key) pair
    if settings.es_api_key is not None:
        key = settings.es_api_key.get_secret_value()  # checked and normalised by the settings
        # The 'encoded' form is base64, which has no ':'; ID:API_KEY is the pair it encodes.
        security["api_key"] = tuple(key.split(":", 1)) if ":" in key else key
    if settings.es_ca_certs is not None:
        security["ca_certs"] = str(settings.es_ca_certs)
    # A request that timed out is not retried: the client's 3 retries made one hung cluster cost
    # 4 x ESRR_ES_TIMEOUT_S per call (refused connections are still retried, at no cost).
    # VersionedTransport: a cluster too old for the 8.x client (before 7.14) is refused naming its version.
    return Elasticsearch(
        settings.es_url,
        request_timeout=settings.es_timeout_s,
        retry_on_timeout=False,
        transport_class=VersionedTransport,
        **security,
    )


def product(client: Elasticsearch) -> str:
    """The engine a client talks to, as messages name it: Elasticsearch, or what the client says (OpenSearch)."""
    return getattr(client, "product", "Elasticsearch")


def cluster_url(client: Elasticsearch) -> str:
    """The node URL(s) a client talks to, for error messages."""
    own = getattr(client, "cluster_url", None)  # the OpenSearch client names its own
    if isinstance(own, str):
        return own
    try:
        return ", ".join(str(node.base_url) for node in client.transport.node_pool.all())
    except AttributeError:  # a client without the usual transport (a stub in tests)
        return "the configured URL"


def _api_problem(exc: ApiError) -> str:
    """``HTTP <status> (<error type>: <reason>)`` of an Elasticsearch error answer, as far as it tells."""
    error = exc.body.get("error") if isinstance(exc.body, dict) else exc.body
    if isinstance(error, dict):
        kind, reason = error.get("type"), error.get("reason")
    else:  # a HEAD request's answer has no body; a proxy may answer plain text
        kind, reason = None, str(error)[:300] if error else None
    if not kind and exc.message not in (None, "None"):
        kind = exc.message
    detail = ": ".join(str(part) for part in (kind, reason) if part) or "no reason given"
    return f"HTTP {exc.meta.status} ({detail})"


NOT_ELASTICSEARCH_FIX = (
    "it is not Elasticsearch 8 (its answers lack the X-Elastic-Product header); set ESRR_ES_URL "
    "to the cluster's address, or check that no proxy answers in its place (for an OpenSearch "
    "cluster set ESRR_BACKEND=opensearch)"
)


# Answers that Elasticsearch always sends with its product header; others may lack it (401 to an
# unauthenticated request, 413, or a 502/503 from a proxy in front of a healthy cluster).
_ALWAYS_LABELLED = (404, 405, 501)


def not_elasticsearch(status: int, headers: Any) -> bool:
    """Whether an answer that Elasticsearch would label (``_ALWAYS_LABELLED``) lacks its X-Elastic-Product header.

    The client checks the header on successful answers only, so a web server that answers
    404 to everything would otherwise read as a cluster without the alias (elastic/elasticsearch#73434).
    """
    return status in _ALWAYS_LABELLED and not (headers and headers.get("x-elastic-product") == "Elasticsearch")


def _api_fix(exc: ApiError, engine: str = "Elasticsearch") -> str:
    """What to do about one Elasticsearch (or OpenSearch) error answer, by its HTTP status."""
    status = exc.meta.status
    if engine == "Elasticsearch" and not_elasticsearch(status, exc.meta.headers):
        return NOT_ELASTICSEARCH_FIX
    if status == 401:
        return (
            "the cluster has security on: put a user and password it accepts in ESRR_ES_URL, e.g. "
            "https://USER:PASSWORD@HOST:9200, or an API key in ESRR_ES_API_KEY"
        )
    if status == 403:
        return (
            "the credentials (ESRR_ES_URL's user or ESRR_ES_API_KEY) lack privileges on the ESRR_ES_ALIAS "
            "alias and its indices (<alias>-*); grant them (e.g. a role with all on those names) or use others"
        )
    if status == 429 or status >= 500:
        return "the cluster is overloaded or failing; check GET _cluster/health and its logs, then retry"
    return "fix what the reason names (index names come from ESRR_ES_ALIAS) and retry"


def _tls_fix(exc: SSLError) -> str:
    """What to do about a failed TLS handshake, by what OpenSSL reported."""
    # A plain-HTTP server answers a TLS hello with HTTP bytes (WRONG_VERSION_NUMBER, or "record layer
    # failure" in newer OpenSSL) or by hanging up (UNEXPECTED_EOF); a CA mismatch is a verify failure.
    if any(sign in str(exc) for sign in ("WRONG_VERSION_NUMBER", "record layer failure", "UNEXPECTED_EOF")):
        return (
            "the server there does not complete a TLS handshake; if it serves plain HTTP, use http:// in "
            "ESRR_ES_URL, else check the host and port"
        )
    return (
        "ESRR_ES_CA_CERTS must name the PEM file of the CA that signed the cluster's certificate "
        "(Elasticsearch 8: config/certs/http_ca.crt); set it, or check that the file it names is that CA "
        "and that ESRR_ES_URL's host is one the certificate names"
    )


@contextmanager
def translate_errors(client: Elasticsearch, passing: tuple[type[ApiError], ...] = ()) -> Iterator[None]:
    """Turn Elasticsearch client errors (other than ``passing``) into a ``BackendError`` that names the fix."""
    try:
        yield
    except passing:
        raise
    except SSLError as exc:  # before ConnectionError, of which it is a kind
        raise BackendError(
            f"the TLS handshake with {product(client)} at {cluster_url(client)} failed; {_tls_fix(exc)} ({exc})"
        ) from exc
    except ConnectionTimeout as exc:
        raise BackendError(
            f"{product(client)} at {cluster_url(client)} did not answer within ESRR_ES_TIMEOUT_S; "
            f"check the cluster (GET _cluster/health, its logs) or raise ESRR_ES_TIMEOUT_S "
            f"({exc})"
        ) from exc
    except ESConnectionError as exc:
        raise BackendError(
            f"cannot reach {product(client)} at {cluster_url(client)}; start it or set "
            f"ESRR_ES_URL ({type(exc).__name__}: {exc})"
        ) from exc
    except UnsupportedProductError as exc:
        raise BackendError(
            f"{cluster_url(client)} does not answer as Elasticsearch 8; set ESRR_ES_URL to an "
            f"Elasticsearch cluster, or ESRR_BACKEND=opensearch for an OpenSearch one ({exc})"
        ) from exc
    except ServerTooOld as exc:
        raise BackendError(f"{product(client)} at {cluster_url(client)}: {exc.message}") from exc
    except ApiError as exc:
        raise BackendError(
            f"{product(client)} at {cluster_url(client)} refused a request with "
            f"{_api_problem(exc)}; {_api_fix(exc, product(client))}"
        ) from exc
    except TransportError as exc:
        raise BackendError(
            f"the request to {product(client)} at {cluster_url(client)} failed "
            f"({type(exc).__name__}: {exc}); check ESRR_ES_URL and the cluster logs, "
            "then retry"
        ) from exc


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


@dataclass(frozen=True)
class _Served:
    """The concrete index being searched and the statistics of the same load."""

    index: str
    stats: CorpusStats


class ElasticsearchBackend:
    """BM25 over title+abstract from Elasticsearch, with each hit's precomputed data."""

    engine = "elasticsearch"

    def __init__(self, client: Elasticsearch, alias: str, stats_root: Path, served: _Served | None = None) -> None:
        self.client = client
        self.alias = alias
        self.stats_root = Path(stats_root)
        self._lock = threading.Lock()
        self._served = served or self._resolve()

    @classmethod
    def from_settings(cls, settings: CommonSettings) -> ElasticsearchBackend:
        """Connect to ``ESRR_ES_URL`` and serve ``ESRR_ES_ALIAS``."""
        return cls(connect(settings), settings.es_alias, stats_root(settings))

    def _resolve(self, known: _Served | None = None) -> _Served:
        """The index the alias names now, with its statistics (``known`` kept if it is still that index)."""
        served = served_index(self.client, self.alias)
        if served is None:
            raise BackendError(f"no Elasticsearch alias {self.alias!r} at {cluster_url(self.client)}; {BUILD_HINT}")
        index, version, build_id = served.index, served.version, served.build_id
        if known is not None and known.index == index and build_id in (None, known.stats.build_id):
            return known
        directory = stats_dir(self.stats_root, version)
        try:
            stats = CorpusStats.load(directory)
        except StatsError as exc:
            raise BackendError(
                f"index {index!r} needs statistics version {version!r} at {directory}, "
                f"which cannot be read ({exc}); run this process with the ESRR_HOME the "
                "index was built with, or rebuild: esrr index build --backend "
                "elasticsearch"
            ) from exc
        if stats.version != version or build_id not in (None, stats.build_id):
            raise BackendError(
                f"statistics at {directory} are version {stats.version!r} (build "
                f"{stats.build_id}), index {index!r} is {version!r} (build {build_id}), so they "
                "come from different loads; rebuild: esrr index build --backend elasticsearch"
            )
        return _Served(index, stats)

    def reload(self) -> bool:
        """Follow the alias to its current index; True when the served version changed."""
        served = self._resolve(self._served)
        with self._lock:
            changed = served is not self._served  # another index, or the same name built again
            self._served = served
        return changed

    def current(self) -> ElasticsearchBackend:
        """This backend while the alias still names its index, else a backend of the index it names now.

        Two requests; the statistics load only when the alias has moved. This backend is
        left as it was, so a search under way keeps its statistics and its hits from one index.
        """
        served = self._resolve(self._served)
        return self if served is self._served else type(self)(self.client, self.alias, self.stats_root, served)

    @property
    def index(self) -> str:
        """The concrete index being searched."""
        return self._served.index

    @property
    def version(self) -> str:
        """The served index version (its statistics' version)."""
        return self._served.stats.version

    @property
    def stats(self) -> CorpusStats:
        """The served index's term statistics."""
        return self._served.stats

    def _on_served(self, call: Callable[[str], T]) -> tuple[T, _Served]:
        """``call(index)`` on the served index, following the alias once if that index was deleted meanwhile;
        an Elasticsearch refusal of the request itself (400) is a ``QueryRefused`` with its reason."""
        served = self._served
        if (change := served.stats.changed_files()) is not None:
            raise BackendError(change)
        try:
            with translate_errors(self.client, passing=(NotFoundError, BadRequestError, ApiError)):
                return call(served.index), served
        except NotFoundError:
            self.reload()
            served = self._served
        except BadRequestError as error:
            raise QueryRefused(f"{product(self.client)} refused the search: {_api_problem(error)}") from None
        except ApiError as error:
            # A search that meets its index while a prune deletes it fails with "all shards failed" (a 503 on
            # OpenSearch 2.19, 1 search in about 50 during a reindex and prune) rather than a 404: follow the alias
            # once if it has moved; otherwise the error is the cluster's own.
            if error.meta.status < 500 or not self.reload():
                with translate_errors(self.client):
                    raise
            served = self._served
        try:
            with translate_errors(self.client, passing=(BadRequestError,)):
                return call(served.index), served
        except BadRequestError as error:
            raise QueryRefused(f"{product(self.client)} refused the search: {_api_problem(error)}") from None

    def prepare(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The body with its text clauses on ``text`` rewritten (see the module docstring); Elasticsearch checks
        the rest."""
        return {key: (_on_text(value) if key in ("query", "post_filter") else value) for key, value in body.items()}

    def first_stage(self, prepared: Mapping[str, Any], k: int) -> FirstStage:
        """The top-``k`` hits of the body's query (ties by doc id), with its total, aggregations and shards."""
        check_k(k)
        request = {key: value for key, value in prepared.items() if key not in PAGE_KEYS}
        request.update(
            size=k,
            sort=[{"_score": {"order": "desc"}}, {"doc_id": {"order": "asc"}}],
            track_scores=True,
            _source=HIT_FIELDS,
        )
        request["from"] = 0
        response, served = self._on_served(lambda index: self.client.search(index=index, body=request).body)
        hits = response.get("hits", {})
        return FirstStage(
            [self._hit(hit, served) for hit in hits.get("hits", [])],
            hits.get("total"),
            response.get("aggregations"),
            response.get("_shards"),
            bool(response.get("timed_out")),
        )

    def reading(self) -> AbstractContextManager:
        """Nothing to check: the hits' statistics were read when the index was opened, and Elasticsearch's files
        are its own."""
        return nullcontext()

    def check_answer(self, prepared: Mapping[str, Any], hits: int, limits: AnswerLimits) -> None:
        """Nothing to weigh beforehand: Elasticsearch renders the answer, which ``page`` weighs as it passes it on."""

    def page(
        self, prepared: Mapping[str, Any] | None, hits: Sequence[Hit], max_bytes: int | None = None
    ) -> list[dict[str, Any]]:
        """Each hit's ``_source``, ``highlight`` and ``fields`` as the body asks, fetched for these hits only.

        Elasticsearch filters and highlights; ``max_bytes`` bounds what the gateway passes on (``AnswerTooLarge``).
        """
        prepared = prepared or {}
        if not hits:
            return []
        ids = [hit.doc_id for hit in hits]
        request: dict[str, Any] = {key: prepared[key] for key in PAGE_KEYS if key in prepared}
        request["_source"] = _without_internal(prepared.get("_source", True))
        query = prepared.get("query") or {"match_all": {}}
        request.update(
            query={"bool": {"must": [query], "filter": [{"ids": {"values": ids}}]}},
            size=len(ids),
            track_total_hits=False,
        )
        request["from"] = 0
        response, _ = self._on_served(lambda index: self.client.search(index=index, body=request).body)
        found = {hit["_id"]: hit for hit in response["hits"]["hits"]}
        shown = [
            {
                key: found[doc_id][key]
                for key in ("_source", "highlight", "fields", "_explanation", "_version")
                if key in found.get(doc_id, {})
            }
            for doc_id in ids
        ]
        if max_bytes is not None:
            AnswerBudget(max_bytes, len(ids)).spend(
                len(ids) * HIT_ENVELOPE_BYTES + len(json.dumps(shown, ensure_ascii=False))
            )
        return shown

    def count(self, prepared: Mapping[str, Any]) -> int:
        """Elasticsearch's count of the documents the prepared body's query matches."""
        request = {"query": prepared["query"]} if prepared.get("query") is not None else {}
        response, _ = self._on_served(lambda index: self.client.count(index=index, body=request).body)
        return int(response["count"])

    def sources(self, doc_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """Each document's ``_source`` without esrr's own fields, in the order asked (None where not found): one
        mget."""
        if not doc_ids:
            return []

        def read(index: str) -> dict:
            return self.client.mget(index=index, ids=list(doc_ids), source_excludes=INTERNAL_FIELDS).body

        docs = self._on_served(read)[0]["docs"]
        # An mget of a deleted index is a 200 with the error in each document's place, not a 404: follow the
        # alias once, as _on_served does for a 404, rather than call the documents missing.
        if any("error" in doc for doc in docs):
            self.reload()
            docs = self._on_served(read)[0]["docs"]
        failed = next((doc["error"] for doc in docs if "error" in doc), None)
        if failed is not None:
            reason = failed.get("reason", failed) if isinstance(failed, dict) else failed
            raise BackendError(
                f"{product(self.client)} at {cluster_url(self.client)} could not read documents of "
                f"index {self.index!r}: {str(reason)[:300]}; check GET _cluster/health and its logs"
            )
        return [doc.get("_source") if doc.get("found") else None for doc in docs]

    def description(self) -> dict[str, Any]:
        """The served index's mappings (without the stored term ids) and settings, as Elasticsearch has them."""
        response, served = self._on_served(lambda index: self.client.indices.get(index=index).body)
        info: dict[str, Any] = response.get(served.index) or next(iter(response.values()), {})
        mappings = dict(info.get("mappings") or {})
        mappings["properties"] = {
            name: spec for name, spec in (mappings.get("properties") or {}).items() if name not in TERM_FIELDS
        }
        return {"mappings": mappings, "settings": info.get("settings") or {}}

    def passthrough(self, body: Mapping[str, Any], params: Mapping[str, str]) -> dict[str, Any]:
        """Elasticsearch's own answer to a search that is not reranked (a sort, a scroll, a point in time)."""
        body = self.prepare(body)
        options: dict[str, Any] = dict(params)  # URL options, sent on as query parameters
        if "pit" in body:  # a point in time names its index itself
            response, _ = self._on_served(lambda index: self.client.search(body=dict(body), **options).body)
        else:
            response, _ = self._on_served(
                lambda index: self.client.search(index=index, body=dict(body), **options).body
            )
        return _without_internal_fields(response)

    def search_context(self, action: str, body: Mapping[str, Any], keep_alive: str | None = None) -> tuple[int, dict]:
        """Elasticsearch's own status and answer to a scroll's or a point in time's call (``SEARCH_CONTEXT_CALLS``):
        the next page of a scroll a passed-through search started, clearing it, opening a point in time on the
        served index, closing one. An answer Elasticsearch refuses (an expired scroll: 404) comes back as it is."""
        if action not in SEARCH_CONTEXT_CALLS:
            raise ValueError(f"{action!r} is none of {SEARCH_CONTEXT_CALLS}")
        client = self.client.options(ignore_status=(400, 404))
        if action == "open_point_in_time":
            if keep_alive is None:  # the gateway refuses a _pit without one (client_api.open_point_in_time)
                raise ValueError("opening a point in time needs keep_alive")
            alive = keep_alive
            answer, _ = self._on_served(lambda index: client.open_point_in_time(index=index, keep_alive=alive))
        else:
            with translate_errors(self.client):
                answer = getattr(client, action)(body=dict(body))
        body_out = answer.body if isinstance(answer.body, dict) else {"error": str(answer.body)[:300]}
        return answer.meta.status, _without_internal_fields(body_out)

    @staticmethod
    def _hit(hit: dict, served: _Served) -> Hit:
        source = hit["_source"]
        score = hit.get("_score")
        if score is None:  # sorted searches report the score in the sort values
            score = hit["sort"][0]
        doc_id = str(source["doc_id"])
        try:
            terms = served.stats.doc_terms(served.stats.row(doc_id))
        except StatsError as error:  # a document written to the index behind esrr's back
            raise BackendError(f"index {served.index!r} returned a hit its statistics lack: {error}") from None
        return Hit(doc_id, float(score), source.get("title") or "", terms)


def _without_internal_fields(response: dict) -> dict:
    """A search response with the fields esrr keeps for itself (``text``, the term ids) left out of each hit."""
    for hit in response.get("hits", {}).get("hits", []):
        if isinstance(hit.get("_source"), dict):
            for name in INTERNAL_FIELDS:
                hit["_source"].pop(name, None)
    return response


def _without_internal(source: Any) -> Any:
    """A ``_source`` request that leaves out the fields esrr keeps for itself (``text``, the term ids)."""
    if source is False or source is None:
        return source
    if source is True:
        return {"excludes": INTERNAL_FIELDS}
    if isinstance(source, (str, list)):
        return {"includes": [source] if isinstance(source, str) else source, "excludes": INTERNAL_FIELDS}
    if isinstance(source, dict):
        excludes = source.get("excludes", source.get("exclude", []))
        excludes = [excludes] if isinstance(excludes, str) else list(excludes) if isinstance(excludes, list) else []
        rest = {key: value for key, value in source.items() if key not in ("excludes", "exclude")}
        return {**rest, "excludes": excludes + INTERNAL_FIELDS}
    return source  # Elasticsearch names what is wrong with it


_DEPTH = 32


def _on_text(query: Any, depth: int = 0) -> Any:
    """``query`` with each ``match`` on ``text`` that asks for any word made the title-or-abstract query (the
    same documents, per-field scores); everything else as it was."""
    if depth > _DEPTH or not isinstance(query, dict):
        return query
    rewritten = {}
    for kind, clause in query.items():
        if kind == "match" and isinstance(clause, dict) and len(clause) == 1 and TEXT_FIELD in clause:
            value = clause[TEXT_FIELD]
            options = value if isinstance(value, dict) else {"query": value}
            if set(options) <= {"query", "boost"} or (
                set(options) <= {"query", "boost", "operator"} and str(options.get("operator", "or")).lower() == "or"
            ):
                should = [{"match": {field: {"query": options.get("query")}}} for field in ("title", "abstract")]
                rewritten["bool"] = {"should": should, **({"boost": options["boost"]} if "boost" in options else {})}
                continue
        if kind == "bool" and isinstance(clause, dict):
            clause = {
                occur: (
                    [_on_text(item, depth + 1) for item in value]
                    if isinstance(value, list)
                    else _on_text(value, depth + 1)
                )
                if occur in ("must", "should", "filter", "must_not")
                else value
                for occur, value in clause.items()
            }
        rewritten[kind] = clause
    return rewritten
