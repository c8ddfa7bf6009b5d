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
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from elasticsearch import ApiError, BadRequestError, Elasticsearch, NotFoundError

from es_rerank.backends.answer_budget import HIT_ENVELOPE_BYTES, AnswerBudget, AnswerLimits
from es_rerank.backends.base import BackendError, FirstStage, Hit, QueryRefused, check_k
from es_rerank.backends.es_body import (
    on_text,
    source_without_internal,
    widened_source,
    with_text,
    without_internal_fields,
)
from es_rerank.backends.es_client import api_problem, cluster_url, connect, product, translate_errors
from es_rerank.backends.es_layout import BUILD_HINT, INTERNAL_FIELDS, TERM_FIELDS, served_index, stats_dir, stats_root
from es_rerank.stats import CorpusStats, StatsError

if TYPE_CHECKING:
    from es_rerank.settings import CommonSettings

T = TypeVar("T")

# A hit's precomputed data comes from the served statistics, the same ids the load stored in each
# document (one load writes both): fetching those made a top-500 response 5.7 times larger.
HIT_FIELDS = ["doc_id", "title"]
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
SEARCH_CONTEXT_CALLS = ("scroll", "clear_scroll", "open_point_in_time", "close_point_in_time")


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
            raise QueryRefused(f"{product(self.client)} refused the search: {api_problem(error)}") from None
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
            raise QueryRefused(f"{product(self.client)} refused the search: {api_problem(error)}") from None

    def prepare(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The body with its text clauses on ``text`` rewritten (see the module docstring); Elasticsearch checks
        the rest."""
        return {key: (on_text(value) if key in ("query", "post_filter") else value) for key, value in body.items()}

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
        spec, text_filter = widened_source(prepared.get("_source", True))
        request["_source"] = source_without_internal(spec)
        query = prepared.get("query") or {"match_all": {}}
        request.update(
            query={"bool": {"must": [query], "filter": [{"ids": {"values": ids}}]}},
            size=len(ids),
            track_total_hits=False,
        )
        request["from"] = 0
        response, _ = self._on_served(lambda index: self.client.search(index=index, body=request).body)
        with_text(response["hits"]["hits"], text_filter)
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
        """Each document's ``_source`` without esrr's own fields, in the order asked (None where not found): an mget."""
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
        text_filter = None
        if "_source" in body:
            spec, text_filter = widened_source(body["_source"])
            body = {**body, "_source": spec}
        options: dict[str, Any] = dict(params)  # URL options, sent on as query parameters
        if "pit" in body:  # a point in time names its index itself
            response, _ = self._on_served(lambda index: self.client.search(body=dict(body), **options).body)
        else:
            response, _ = self._on_served(
                lambda index: self.client.search(index=index, body=dict(body), **options).body
            )
        response = without_internal_fields(response)
        with_text(response.get("hits", {}).get("hits", []), text_filter)
        return response

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
        return answer.meta.status, without_internal_fields(body_out)

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
