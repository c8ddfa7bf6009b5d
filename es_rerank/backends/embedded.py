"""The embedded BM25 backend: a tantivy index directory plus its term statistics.

Zero set-up: no server, the index is a directory under ``ESRR_HOME`` (its layout:
``embedded_schema``; its version folders: ``embedded_version``). tantivy's BM25 is
Lucene's (k1 1.2, b 0.75).

Search bodies (``prepare`` / ``first_stage`` / ``page``) are read by ``embedded_search``
(the Query DSL by ``query_dsl``) and translated to tantivy by ``tantivy_query``; each
document's whole ``_source`` is one stored JSON field, read only for the page shown (a
search of the top 500 reads no stored field).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from es_rerank.backends.aggregation_plan import AggregationPlan
from es_rerank.backends.aggregations import FieldFacts
from es_rerank.backends.analysis import analysis_settings
from es_rerank.backends.answer_budget import HIT_ENVELOPE_BYTES, AnswerBudget, AnswerLimits, check_estimate
from es_rerank.backends.base import BackendError, FirstStage, Hit, check_k, unread_hits
from es_rerank.backends.embedded_order import best_first
from es_rerank.backends.embedded_schema import mapping_properties, searched_fields
from es_rerank.backends.embedded_search import EmbeddedSearch, read_search
from es_rerank.backends.embedded_version import (
    IndexBeingWritten,
    changed_reason,
    current_version,
    folder_state,
    open_files,
    open_tantivy,
    read_meta,
)
from es_rerank.backends.highlight import SourceFilter, filter_source, highlight, with_searched_text
from es_rerank.backends.query_tree import AGGREGATABLE, Bool, Node
from es_rerank.backends.sorting import after, in_order, sort_values
from es_rerank.backends.tantivy_query import TantivyTranslation
from es_rerank.backends.term_expansion import TermDictionary
from es_rerank.held_files import FileGuard
from es_rerank.stats import CorpusStats, saved_build_id

_TIE_MARGIN = 64
SOURCE_SAMPLE = 1000  # stored documents read to estimate an answer's weight (ESRR_GATEWAY_MAX_ANSWER_BYTES)


def _reads_files(method: Callable) -> Callable:
    """The method reads the version's files inside ``EmbeddedBackend.reading``."""

    @functools.wraps(method)
    def checked(self: EmbeddedBackend, *args: Any, **kwargs: Any) -> Any:
        with self.reading():
            return method(self, *args, **kwargs)

    return checked


class EmbeddedBackend:
    """BM25 top-k over an embedded tantivy index, with each hit's precomputed data."""

    engine = "embedded"

    def __init__(self, version_dir: Path, check_ids: bool = False) -> None:
        self.version_dir = version_dir
        self.meta = read_meta(version_dir)
        self._stats, segments = open_files(version_dir, check_ids)
        # The segment files are held (and leased) before tantivy maps them: a change from then on is seen.
        version = self._stats.version
        self._files = FileGuard(
            self._stats.held_files + tuple(segments),
            label=str(version_dir),
            refusal=lambda change: BackendError(changed_reason(version, change)),
        )
        self._refused: tuple[tuple, str] | None = None  # the last failed verification of a changed folder
        self._index, self._searcher = open_tantivy(version_dir)
        self._schema = self._index.schema
        self.searched = searched_fields(self._schema)  # text, and title and abstract alone where built with them
        self._field_words: dict[str, TermDictionary] = {}
        self._tantivy = TantivyTranslation(self._schema, self.field_words)

    @classmethod
    def open_current(cls, root: Path) -> EmbeddedBackend:
        """Open the version that ``root/CURRENT`` points at."""
        return cls(root / current_version(root))

    @property
    def version(self) -> str:
        """The served index version (its statistics' version)."""
        return self._stats.version

    def current(self) -> EmbeddedBackend:
        """This backend while ``CURRENT`` still names its folder and build and its files are as verified, else the
        version it names now, opened.

        The build id tells a folder rebuilt under the same name (after a prune freed it) from
        this one. A served file that changed, or was unlinked (a rename over it), is opened
        again only if the folder verifies whole now (checksums); a ``BackendError`` says why
        not, and this backend stays: it refuses searches if its files changed, and serves
        what it holds if they were only unlinked.
        """
        root = self.version_dir.parent
        version = current_version(root)
        if version != self.version_dir.name or saved_build_id(self.version_dir / "stats") != self._stats.build_id:
            return EmbeddedBackend(root / version)
        change = self._files.change()
        deleted = self._files.deleted()
        if change is None and not deleted:
            return self
        why = (
            changed_reason(self.version, change)
            if change
            else (
                f"{', '.join(deleted)} of index version {self.version!r} {'was' if len(deleted) == 1 else 'were'} "
                "unlinked while served (this gateway serves the copy it holds)"
            )
        )
        state = folder_state(self.version_dir)
        if self._refused is not None and self._refused[0] == state:  # not read again until the folder changes
            raise BackendError(self._refused[1])
        try:
            return EmbeddedBackend(self.version_dir, check_ids=True)
        except IndexBeingWritten:  # tried again at the next look: the writer's close changes no stat
            raise
        except BackendError as error:
            self._refused = (state, f"{why}; opened again, it does not verify: {error}")
            raise BackendError(self._refused[1]) from None

    @property
    def index(self) -> str:
        """The name of the index being searched: its version (a directory under the embedded root)."""
        return self._stats.version

    @property
    def stats(self) -> CorpusStats:
        """The served index's term statistics."""
        return self._stats

    def reading(self) -> AbstractContextManager:
        """Read this version's files inside this: a ``BackendError`` when one changed on disk before or during it
        (``es_rerank.held_files``); a search's whole ranking reads inside one."""
        return self._files.reading()

    def _top(self, query: tantivy.Query, k: int, count: bool = False) -> tuple[list, int | None]:
        """tantivy's top hits of ``query``, enough that a tie at the ``k``-th score is fetched whole, and the count."""
        limit = min(k + _TIE_MARGIN, self._stats.n_docs)
        while True:
            result = self._searcher.search(query, limit, count=count)
            scored = result.hits
            # Fetch more while a tie at the cut-off could continue past what was fetched.
            if len(scored) < limit or limit >= self._stats.n_docs or scored[min(k, len(scored)) - 1][0] > scored[-1][0]:
                return scored, result.count  # type: ignore[attr-defined]  # not in tantivy's stubs
            limit *= 2

    def _int_values(self, field: str, addresses: list[tantivy.DocAddress]) -> list[Any]:
        """An integer fast field's values (``row``, ``year``: None where a document has none); tantivy's stubs give
        every fast field's value types at once."""
        return self._searcher.fast_field_values(field, addresses)

    def _ranked(self, scored: list, k: int) -> list[Hit]:
        """The top ``k`` of tantivy's hits, equal scores by ascending doc id, with their precomputed data.

        No stored field is read (``page`` reads them for the hits shown): the title is left empty.
        """
        rows = self._int_values("row", [address for _, address in scored])
        ids = self._stats.doc_ids_at(rows)  # one lookup for all, not one per hit
        order = best_first([score for score, _ in scored], ids, k)
        return unread_hits(
            [ids[i] for i in order],
            [float(scored[i][0]) for i in order],
            self._stats.doc_terms_at(np.asarray(rows, dtype=np.int64)[order]),
            [scored[i][1] for i in order],
        )

    def prepare(self, body: Mapping[str, Any]) -> EmbeddedSearch:
        """A search body checked (translated when first searched); ``QueryRefused`` names what the embedded backend
        cannot serve, or the limit of ``active_limits()`` (the request's ``QueryLimits``) that its query passes."""
        return read_search(body, self._tantivy, self.field_facts, self._scoped_aggregation, self.searched)

    @_reads_files
    def first_stage(self, prepared: EmbeddedSearch, k: int) -> FirstStage:
        """The top-``k`` hits of a prepared search, its hit count and aggregations."""
        check_k(k)
        if self._stats.n_docs == 0:  # tantivy panics on a search limit of 0
            return FirstStage(
                [],
                {"value": 0, "relation": "eq"} if prepared.total_limit is not None else None,
                _empty_aggs(prepared.aggs),
                _SHARDS,
            )
        count: int | None
        if prepared.sort is not None:
            scored, count = self._sorted(prepared, k)
        else:
            scored, count = self._top(prepared.query, k, count=prepared.total_limit is not None)
        total = None
        if prepared.total_limit is not None and count is not None:
            total = {
                "value": min(count, prepared.total_limit),
                "relation": "gte" if count > prepared.total_limit else "eq",
            }
        aggregations = None
        if prepared.aggs:
            aggregations = _es_aggregations(
                self._searcher.aggregate(prepared.aggs_query, _tantivy_aggs(prepared.aggs)), prepared.aggs
            )
        hits = self._ranked(scored, k) if prepared.sort is None else self._in_place(scored)
        return FirstStage(hits, total, aggregations, _SHARDS)

    def _sorted(self, prepared: EmbeddedSearch, k: int) -> tuple[list, int]:
        """The first ``k`` matches of a sorted search after its ``search_after``, in the sort's order, and the count.

        Every match is read (its score, row, id and year from the fast fields) and ordered here: the cost grows with
        the matches, not with ``k``."""
        assert prepared.sort is not None
        matched = self._searcher.search(prepared.query, self._stats.n_docs, count=True)
        addresses = [address for _, address in matched.hits]
        rows = self._int_values("row", addresses)
        years = self._int_values("year", addresses)
        ids = self._stats.doc_ids_at(rows)
        items = [
            (sort_values(prepared.sort, float(score), int(row), doc_id, year), int(row), (score, address))
            for (score, address), row, doc_id, year in zip(matched.hits, rows, ids, years, strict=True)
        ]
        if prepared.search_after is not None:
            items = [item for item in items if after(item[0], prepared.search_after, prepared.sort)]
        count: int = matched.count  # type: ignore[attr-defined]  # not in tantivy's stubs
        return [payload for _, _, payload in in_order(items, prepared.sort)[:k]], count

    def _in_place(self, scored: list) -> list[Hit]:
        """tantivy's hits in the order given (a sort's), with their precomputed data."""
        rows = self._int_values("row", [address for _, address in scored])
        ids = self._stats.doc_ids_at(rows)
        scores = [float(score) for score, _ in scored]
        return unread_hits(ids, scores, self._stats.doc_terms_at(rows), [address for _, address in scored])

    @_reads_files
    def page(
        self, prepared: EmbeddedSearch | None, hits: Sequence[Hit], max_bytes: int | None = None
    ) -> list[dict[str, Any]]:
        """Each hit's ``_source`` (filtered) and ``highlight``, read from the stored documents of these hits only.

        ``max_bytes`` bounds what is rendered: ``AnswerTooLarge`` before any highlighting when
        the sources and the tags the highlight must add (each hit's query words, counted in its
        term ids) pass it, else as soon as the page rendered passes it.
        """
        patterns = prepared.source if prepared is not None else SourceFilter((), ())
        marks = prepared.highlight if prepared is not None else ()
        stored = [self._stored_bytes(hit) for hit in hits]
        sources = [json.loads(raw) for raw in stored]
        shown: list[dict[str, Any]] = []
        for source in sources:
            entry: dict[str, Any] = {}
            if patterns is not None:
                entry["_source"] = filter_source(with_searched_text(source, patterns), patterns)
            shown.append(entry)
        if prepared is not None and prepared.sort is not None:
            self._add_sort_values(prepared, hits, shown)
        budget = AnswerBudget(max_bytes, len(hits)) if max_bytes is not None else None
        if budget is not None:
            budget.spend(
                sum(
                    HIT_ENVELOPE_BYTES + _shown_bytes(raw, source, entry.get("_source"))
                    for raw, source, entry in zip(stored, sources, shown)
                ),
                "would weigh at least",
            )
            if marks and prepared is not None:  # the tags alone, before the work of placing them
                budget.spend(self._fewest_tag_bytes(prepared, hits), "would weigh at least")
        words = prepared.words if prepared is not None else frozenset()
        for hit_source, entry in zip(sources, shown):
            marked = {
                field.name: fragments
                for field in marks
                if (fragments := highlight(str(hit_source.get(field.name, "")), words, field))
            }
            if marked:
                entry["highlight"] = marked
                if budget is not None:
                    budget.spend(
                        sum(
                            len(name) + 8 + sum(len(fragment) + 3 for fragment in fragments)
                            for name, fragments in marked.items()
                        )
                    )
        return shown

    def _add_sort_values(self, prepared: EmbeddedSearch, hits: Sequence[Hit], shown: list[dict[str, Any]]) -> None:
        """Each sorted hit's ``sort`` values, and its ``_score`` null unless the sort or ``track_scores`` asks for it,
        as Elasticsearch shows them."""
        assert prepared.sort is not None
        addresses = [hit.address for hit in hits]
        rows = self._int_values("row", addresses) if hits else []
        years = self._int_values("year", addresses) if hits else []
        scored = prepared.track_scores or any(key.field == "_score" for key in prepared.sort)
        for hit, row, year, entry in zip(hits, rows, years, shown, strict=True):
            entry["sort"] = sort_values(prepared.sort, hit.score, int(row), hit.doc_id, year)
            if not scored:
                entry["_score"] = None

    def _fewest_tag_bytes(self, prepared: EmbeddedSearch, hits: Sequence[Hit]) -> int:
        """The bytes of the tags a page's highlight adds at least: each hit's query words in each highlighted field
        (from its term ids), as many as its fragments can hold (all for ``number_of_fragments`` 0)."""
        ids = self._stats.vocab.lookup(sorted(prepared.words))
        total = 0
        for field in prepared.highlight:
            tags = len(field.pre_tag) + len(field.post_tag)
            for hit in hits:
                found = int(
                    np.isin(hit.terms.title_ids if field.name == "title" else hit.terms.abstract_ids, ids).sum()
                )
                total += tags * (found if field.number_of_fragments == 0 else min(found, field.number_of_fragments))
        return total

    @_reads_files
    def check_answer(self, prepared: EmbeddedSearch, hits: int, limits: AnswerLimits) -> None:
        """``AnswerTooLarge`` before any work when ``hits`` hits of ``prepared`` would pass ``limits``; no more hits
        than the index holds are foreseen (a size of 10,000 on a smaller index asks for all of it)."""
        hits = min(hits, self._stats.n_docs)
        if hits:
            check_estimate(hits, self.mean_source_bytes, prepared.source is not None, prepared.highlight, limits)

    @cached_property
    def mean_source_bytes(self) -> float:
        """The mean weight of a stored ``_source``, from up to ``SOURCE_SAMPLE`` documents (read once per version)."""
        if self._stats.n_docs == 0:
            return 0.0
        sample = self._searcher.search(tantivy.Query.all_query(), min(SOURCE_SAMPLE, self._stats.n_docs)).hits
        return sum(len(self._searcher.doc(address)["source"][0]) for _, address in sample) / max(len(sample), 1)

    @_reads_files
    def source(self, hit: Hit) -> dict[str, Any]:
        """The stored ``_source`` of one hit (found by its address, else by its id)."""
        if hit.address is not None:
            return self._stored_source(hit.address)
        source = self.sources([hit.doc_id])[0]
        if source is None:
            raise BackendError(f"document {hit.doc_id!r} is not in index version {self.version}")
        return source

    @_reads_files
    def count(self, prepared: EmbeddedSearch) -> int:
        """How many documents a prepared search's query matches."""
        if self._stats.n_docs == 0:  # tantivy panics on a search limit of 0
            return 0
        return self._searcher.search(prepared.query, 1, count=True).count  # type: ignore[attr-defined]  # as above

    @_reads_files
    def sources(self, doc_ids: Sequence[str]) -> list[dict[str, Any] | None]:
        """Each document's stored ``_source`` in the order asked (None for an id not in this version): one search."""
        wanted = sorted(set(doc_ids))
        if not wanted or self._stats.n_docs == 0:
            return [None] * len(doc_ids)
        found = self._searcher.search(tantivy.Query.term_set_query(self._schema, "doc_id", wanted), len(wanted)).hits
        by_id = {source["doc_id"]: source for source in (self._stored_source(address) for _, address in found)}
        return [by_id.get(doc_id) for doc_id in doc_ids]

    def _stored_source(self, address: Any) -> dict[str, Any]:
        return json.loads(self._searcher.doc(address)["source"][0])

    def _stored_bytes(self, hit: Hit) -> bytes:
        """The stored ``_source`` JSON of one hit, as written (found by its address, else by its id)."""
        if hit.address is not None:
            return self._searcher.doc(hit.address)["source"][0]
        return json.dumps(self.source(hit), ensure_ascii=False).encode("utf-8")

    def description(self) -> dict[str, Any]:
        """The mappings of what this index searches, filters and stores, and its settings, as Elasticsearch shows
        an index."""
        return {
            "mappings": {
                "_meta": {"esrr_stats_version": self.version},
                "properties": mapping_properties(self.searched),
            },
            "settings": {
                "index": {
                    "number_of_shards": "1",
                    "number_of_replicas": "0",
                    "provided_name": self.index,
                    "analysis": analysis_settings(),
                }
            },
        }

    def _scoped_aggregation(
        self, tree: Node, filters: tuple[Node, ...], request: Mapping[str, Any]
    ) -> tuple[int, Mapping[str, Any]]:
        """How many documents ``tree`` and ``filters`` match, and tantivy's ``request`` aggregated over them (a
        filter bucket of an aggregation)."""
        query = self._tantivy(Bool(must=(tree,), filter=filters))
        count = self._searcher.search(query, 1, count=True).count if self._stats.n_docs else 0  # type: ignore[attr-defined]  # as above
        return count, (self._searcher.aggregate(query, dict(request)) if request and count else {})

    @cached_property
    def field_facts(self) -> FieldFacts:
        """The values of each aggregatable field and the span of ``year`` in this version (read once, for the bound
        on an aggregation's buckets and the zero-count terms), and which fields it can aggregate (a version built
        before ``mesh`` was a fast field cannot aggregate it)."""
        values: dict[str, tuple[Any, ...]] = {}
        aggregatable = []
        everything = tantivy.Query.all_query()
        for name in AGGREGATABLE:
            try:
                answer = self._searcher.aggregate(everything, {"t": {"terms": {"field": name, "size": 65_000}}})
            except ValueError:  # "not configured as fast field": an older build
                continue
            aggregatable.append(name)
            keys = [bucket["key"] for bucket in answer.get("t", {}).get("buckets", [])]
            values[name] = tuple(int(key) for key in keys) if name == "year" else tuple(keys)
        span = None
        if "year" in aggregatable and self._stats.n_docs:
            years = self._searcher.aggregate(everything, {"s": {"stats": {"field": "year"}}}).get("s", {})
            if years.get("count"):
                span = (int(years["min"]), int(years["max"]))
        return FieldFacts(values, span, tuple(aggregatable))

    @property
    def text_words(self) -> TermDictionary:
        """The words of the ``text`` field (``field_words``)."""
        return self.field_words("text")

    def field_words(self, field: str) -> TermDictionary:
        """The words of a text field (those of the vocabulary with a document there), which fuzzy words and a
        phrase's prefix expand to; read once per version and field, on its first such search (0.2 s for NFCorpus's
        32k)."""
        if field not in self._field_words:
            frequencies = self._stats.df[field]
            self._field_words[field] = TermDictionary(
                word for word, frequency in zip(self._stats.vocab.terms, frequencies) if frequency > 0
            )
        return self._field_words[field]


_SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}


def _shown_bytes(stored: bytes, source: Mapping[str, Any], shown: Mapping[str, Any] | None) -> int:
    """About what a hit's ``_source`` adds to the answer: as stored when shown whole, else its fields written."""
    if shown is None:
        return 0
    if shown.keys() == source.keys():
        return len(stored)
    return len(json.dumps(shown, ensure_ascii=False))


def _tantivy_aggs(plan: AggregationPlan) -> dict[str, Any]:
    """What tantivy is asked for a search's aggregations (aggregations.py)."""
    return plan.tantivy_request()


def _es_aggregations(result: Mapping[str, Any], plan: AggregationPlan) -> dict[str, Any]:
    """tantivy's aggregations as Elasticsearch answers them, the filter buckets searched (aggregations.py)."""
    return plan.answer(result)


def _empty_aggs(plan: AggregationPlan | None) -> dict[str, Any] | None:
    """The aggregations of a search of an empty index: every bucket empty, every metric over no document."""
    return plan.answer(None) if plan else None
