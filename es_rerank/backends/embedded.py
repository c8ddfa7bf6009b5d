"""The embedded BM25 backend: a tantivy index directory plus its term statistics.

Zero set-up: no server, the index is a directory under ``ESRR_HOME``. Documents
are indexed pre-tokenized by ``es_rerank.text.tokenize`` (joined by spaces and
split again by tantivy's whitespace tokenizer), so BM25 sees exactly our tokens;
tantivy's BM25 is Lucene's (k1 1.2, b 0.75). Each version lives in its own
directory and ``CURRENT`` names the one being served, swapped atomically.

Search bodies (``prepare`` / ``first_stage`` / ``page``) are read by
``es_rerank.backends.query_dsl`` and translated to tantivy queries here: ``text`` is
indexed with positions (phrases), the metadata filters are raw-tokenized keyword
fields and an integer ``year`` (indexed and fast: ranges and aggregations, aggregations.py), and
each document's whole ``_source`` is one stored JSON field, read only for the page
shown (a search of the top 500 reads no stored field).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import tantivy

from es_rerank.backends.aggregations import AggregationPlan, FieldFacts, read_aggregations
from es_rerank.backends.analysis import ANALYZER, analysis_settings
from es_rerank.backends.answer_budget import HIT_ENVELOPE_BYTES, AnswerBudget, AnswerLimits, check_estimate
from es_rerank.backends.base import BackendError, FirstStage, Hit, QueryRefused, check_k
from es_rerank.backends.highlight import (
    FieldHighlight,
    SourceFilter,
    filter_source,
    highlight,
    read_highlight,
    read_source_filter,
    with_searched_text,
)
from es_rerank.backends.query_dsl import read_query
from es_rerank.backends.query_tree import (
    AGGREGATABLE,
    MAX_SHOULD_EXPANSION,
    ON_ELASTICSEARCH,
    Bool,
    Fuzzy,
    Keyword,
    MatchAll,
    MatchNone,
    Node,
    Pattern,
    Phrase,
    PhrasePrefix,
    QueryCost,
    Range,
    UnsupportedQuery,
    Words,
    active_limits,
    check_cost,
    shortened,
)
from es_rerank.backends.sorting import (
    BY_SCORE,
    SortKey,
    after,
    by_score_alone,
    in_order,
    read_search_after,
    read_sort,
    sort_values,
)
from es_rerank.backends.tantivy_files import TantivyFileError, hold_tantivy_files
from es_rerank.backends.term_expansion import TermDictionary, fuzzy_query, phrase_prefix_query
from es_rerank.held_files import FileBeingWritten, FileGuard
from es_rerank.settings import missing_from_home
from es_rerank.stats import CorpusStats, StatsError, saved_build_id
from es_rerank.versions import CURRENT_FILE, VersionNameError, read_pointer

TOKENIZER = "esrr_pretokenized"
_TIE_MARGIN = 64


def whitespace_analyzer() -> tantivy.TextAnalyzer:
    """Tantivy analyzer that splits our pre-tokenized text on spaces only."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


KEYWORD_FIELDS = ("journal", "mesh", "publication_types", "doi")  # filters, beside doc_id
# What index_schema serves, in Elasticsearch's terms: `text` (title and abstract) is searched, the keywords and
# `year` filter, and every field of a document's `_source` is returned whether or not it is indexed.
MAPPING_PROPERTIES = {
    "doc_id": {"type": "keyword"},
    "text": {"type": "text", "index_options": "positions", "analyzer": ANALYZER},
    "title": {"type": "text", "index": False, "copy_to": "text"},
    "abstract": {"type": "text", "index": False, "copy_to": "text"},
    **{name: {"type": "keyword"} for name in KEYWORD_FIELDS},
    "year": {"type": "integer"},
    "authors": {"type": "keyword", "index": False},
    "metadata": {"type": "object", "enabled": False},
}
# timeout: a search here is answered whole, never cut short, so it changes nothing (the gateway checks its value).
BODY_KEYS = (
    "query",
    "post_filter",
    "aggs",
    "aggregations",
    "track_total_hits",
    "_source",
    "highlight",
    "timeout",
    "sort",
    "search_after",
    "track_scores",
)
SOURCE_SAMPLE = 1000  # stored documents read to estimate an answer's weight (ESRR_GATEWAY_MAX_ANSWER_BYTES)
DEFAULT_TOTAL_LIMIT = 10_000  # Elasticsearch counts hits exactly up to 10,000 unless track_total_hits says otherwise


def index_schema() -> tantivy.Schema:
    """One BM25 field (title + abstract tokens, with positions), the stats row, the metadata filters, and the
    stored ``_source``."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False, tokenizer_name=TOKENIZER, index_option="position")
    builder.add_integer_field("row", stored=False, indexed=False, fast=True)
    builder.add_text_field("doc_id", stored=False, tokenizer_name="raw", index_option="basic")
    for name in KEYWORD_FIELDS:
        builder.add_text_field(
            name, stored=False, fast=name in AGGREGATABLE, tokenizer_name="raw", index_option="basic"
        )
    builder.add_integer_field("year", stored=False, indexed=True, fast=True)
    builder.add_bytes_field("source", stored=True, indexed=False, fast=False)
    return builder.build()


def index_document(row: int, text: str, source: Mapping[str, Any]) -> tantivy.Document:
    """The tantivy document of one corpus record: its tokens, statistics row, filters and ``_source``."""
    document = tantivy.Document(
        text=text, row=row, doc_id=source["doc_id"], source=json.dumps(source, ensure_ascii=False).encode("utf-8")
    )
    if isinstance(source.get("journal"), str):  # "" too: Elasticsearch indexes an empty keyword, and a term finds it
        document.add_text("journal", source["journal"])
    for name in ("mesh", "publication_types"):
        for value in source.get(name, ()):
            document.add_text(name, value)
    if source.get("doi"):
        document.add_text("doi", source["doi"])
    if source.get("year") is not None:
        document.add_integer("year", int(source["year"]))
    return document


@dataclass(frozen=True)
class EmbeddedSearch:
    """A search body checked for tantivy (``EmbeddedBackend.prepare``); translated on first use.

    Reading a query and weighing its ``cost`` is cheap; building its tantivy query is not
    (a wildcard's automaton takes milliseconds, holding the GIL), so the gateway weighs the
    search first (its heavy lane) and the translation waits for the search itself.
    """

    tree: Node  # the query's tree
    post_filter: Node | None
    translate: Callable[[Node], tantivy.Query]  # the backend's translation of a tree
    cost: QueryCost  # what the query and its post_filter ask of the index (checked against the QueryLimits)
    aggs: AggregationPlan | None
    total_limit: int | None  # hits counted exactly up to this; None: not counted (track_total_hits false)
    source: SourceFilter | None  # _source includes, excludes; None: no _source
    highlight: tuple[FieldHighlight, ...]
    words: frozenset[str]  # the text clauses' words, which the highlight marks
    sort: tuple[SortKey, ...] | None = None  # None: by descending score (sorting.py)
    search_after: tuple[Any, ...] | None = None  # the sort values the hits come strictly after
    track_scores: bool = False  # show _score on a sort that does not include it

    @cached_property
    def aggs_query(self) -> tantivy.Query:
        """Without the post_filter: what the aggregations count, as in Elasticsearch."""
        return self.translate(self.tree)

    @cached_property
    def query(self) -> tantivy.Query:
        """The query with the post_filter: what the hits match."""
        if self.post_filter is None:
            return self.aggs_query
        return tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, self.aggs_query),
                (tantivy.Occur.Must, tantivy.Query.const_score_query(self.translate(self.post_filter), 0.0)),
            ]
        )


def current_version(root: Path) -> str:
    """The version named by ``root/CURRENT``."""
    try:
        version = read_pointer(root)
    except VersionNameError as error:
        raise BackendError(f"{error} (`esrr index use VERSION`, see `esrr index versions`)") from None
    if version is None and not (root / CURRENT_FILE).is_file():
        raise BackendError(
            missing_from_home(
                f"no embedded index in {Path(root).absolute()}", "build one there with `esrr index build`"
            )
        )
    if version is None:
        raise BackendError(
            f"{root / CURRENT_FILE} is empty; serve a version with `esrr index use VERSION` "
            "(see `esrr index versions`) or build one with `esrr index build`"
        )
    return version


class IndexBeingWritten(BackendError):
    """A file of the version is open for writing by another process: not served until it is closed and verifies."""


def changed_reason(version: str, change: str) -> str:
    """Why a version's searches are refused: its files changed on disk (names, no paths), and the admin's fix."""
    return (
        f"the files of index version {version!r} changed on disk after they were opened and verified ({change}); "
        "its searches are refused rather than read other data than the build wrote: serve another version "
        "(`esrr index use VERSION`) or rebuild it (`esrr index build`); the gateway serves this version again "
        "once its files verify (checksums), at its next look at the index (ESRR_GATEWAY_INDEX_CHECK_S)"
    )


def _folder_state(version_dir: Path) -> tuple:
    """What ``stat`` says of every file of a version folder: a failed verification is tried again when it changes."""
    state: list[tuple[Any, ...]] = []
    for folder in (version_dir / "stats", version_dir / "tantivy"):
        try:
            for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
                st = entry.stat()
                state.append((folder.name, entry.name, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            state.append((folder.name, None))
    return tuple(state)


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
        meta_path = version_dir / "meta.json"
        if not meta_path.is_file():
            raise BackendError(
                f"{version_dir} is not a complete embedded index; build one with "
                "`esrr index build` or serve another version with `esrr index use VERSION` "
                "(`esrr index versions` lists them)"
            )
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise BackendError(
                f"{meta_path} is damaged ({type(error).__name__}: {error}); rebuild the index "
                "(`esrr index build`) or serve another version (`esrr index use`)"
            ) from None
        # A damaged copy (statistics or tantivy files missing) is a BackendError like
        # a missing meta.json, so callers that handle one handle all.
        try:
            self._stats = CorpusStats.load(version_dir / "stats", check_ids=check_ids)
            segments = hold_tantivy_files(version_dir / "tantivy", verify=check_ids)
        except StatsError as error:
            raise BackendError(f"{error} (index version {version_dir.name})") from None
        except FileBeingWritten as error:
            raise IndexBeingWritten(
                f"index version {version_dir.name} is being written ({error.strerror}); it is "
                "served once it is done and verifies, or serve another version "
                "(`esrr index use VERSION`)"
            ) from None
        except TantivyFileError as error:
            raise BackendError(
                f"the tantivy index of {version_dir} is damaged ({error}); rebuild it with "
                "`esrr index build` or serve another version with `esrr index use VERSION`"
            ) from None
        except OSError as error:
            raise BackendError(
                f"cannot read the tantivy index of {version_dir} ({error.strerror}); rebuild "
                "it with `esrr index build` or serve another version with `esrr index use VERSION`"
            ) from None
        # The segment files are held (and leased) before tantivy maps them: a change from then on is seen.
        version = self._stats.version
        self._files = FileGuard(
            self._stats.held_files + tuple(segments),
            label=str(version_dir),
            refusal=lambda change: BackendError(changed_reason(version, change)),
        )
        self._refused: tuple[tuple, str] | None = None  # the last failed verification of a changed folder
        self._schema = index_schema()
        try:
            self._index = tantivy.Index.open(str(version_dir / "tantivy"))
            self._index.register_tokenizer(TOKENIZER, whitespace_analyzer())
            self._searcher = self._index.searcher()
        except ValueError as error:
            tantivy_dir = version_dir / "tantivy"
            if tantivy_dir.is_dir() and not os.access(tantivy_dir, os.W_OK):  # tantivy writes lock files even to read
                raise BackendError(
                    f"cannot open the tantivy index of {version_dir} ({error}): tantivy needs "
                    "to write lock files there; make ESRR_HOME writable"
                ) from None
            raise BackendError(
                f"cannot open the tantivy index of {version_dir} ({error}); it is "
                "incomplete or damaged: rebuild it with `esrr index build` or serve "
                "another version with `esrr index use VERSION`"
            ) from None

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
        state = _folder_state(self.version_dir)
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
        ranked = sorted(zip(scored, rows, ids), key=lambda item: (-item[0][0], item[2]))[:k]
        terms = self._stats.doc_terms_at([row for _, row, _ in ranked])
        return [
            Hit(doc_id, float(score), "", data, address)
            for ((score, address), _, doc_id), data in zip(ranked, terms, strict=True)
        ]

    def prepare(self, body: Mapping[str, Any]) -> EmbeddedSearch:
        """A search body checked (translated when first searched); ``QueryRefused`` names what the embedded backend
        cannot serve, or the limit of ``active_limits()`` (the request's ``QueryLimits``) that its query passes."""
        unknown = next((key for key in body if key not in BODY_KEYS), None)
        if unknown is not None:
            raise QueryRefused(
                f"[{str(unknown)[:40]}] in the search body is not served by the embedded backend, "
                f"which reads {', '.join(BODY_KEYS)} (and size, from, ext); it is {ON_ELASTICSEARCH}"
            )
        aggs = body.get("aggs", body.get("aggregations"))
        try:
            tree = read_query(body["query"]) if body.get("query") is not None else MatchAll()
            post_filter = read_query(body["post_filter"]) if body.get("post_filter") is not None else None
            plan = None
            if aggs is not None:
                plan = read_aggregations(aggs, read_query, self.field_facts, active_limits().max_buckets)
                plan = replace(plan, run_scope=functools.partial(self._scoped_aggregation, tree))
            # The query, its post_filter and the aggregations' filters: one budget (QueryLimits), before tantivy runs.
            searched = (tree,) + ((post_filter,) if post_filter is not None else ()) + (plan.queries() if plan else ())
            cost = check_cost(Bool(must=searched), active_limits())
        except UnsupportedQuery as error:
            raise QueryRefused(str(error)) from None
        sort = read_sort(body["sort"]) if body.get("sort") is not None else None
        search_after = None
        if body.get("search_after") is not None:
            search_after = read_search_after(body["search_after"], sort or BY_SCORE)
            sort = sort or BY_SCORE
        if sort is not None and by_score_alone(sort) and search_after is None:
            sort = None  # the default order
        if not isinstance(body.get("track_scores", False), bool):
            raise QueryRefused(f"[track_scores] must be true or false, got {str(body['track_scores'])[:40]}")
        return EmbeddedSearch(
            tree,
            post_filter,
            self._tantivy,
            cost,
            plan,
            _total_limit(body.get("track_total_hits")),
            read_source_filter(body.get("_source")),
            read_highlight(body["highlight"]) if body.get("highlight") is not None else (),
            frozenset(_words(tree)),
            sort,
            search_after,
            bool(body.get("track_scores", False)),
        )

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
        terms = self._stats.doc_terms_at(list(rows))
        return [
            Hit(doc_id, float(score), "", data, address)
            for (score, address), doc_id, data in zip(scored, ids, terms, strict=True)
        ]

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
            "mappings": {"_meta": {"esrr_stats_version": self.version}, "properties": MAPPING_PROPERTIES},
            "settings": {
                "index": {
                    "number_of_shards": "1",
                    "number_of_replicas": "0",
                    "provided_name": self.index,
                    "analysis": analysis_settings(),
                }
            },
        }

    def _tantivy(self, node: Node, scored: bool = True) -> tantivy.Query:
        """The tantivy query of one node, scored as Elasticsearch scores it (BM25 sums; filters score nothing)."""
        schema, Query, Occur = self._schema, tantivy.Query, tantivy.Occur
        if isinstance(node, Words):
            # In sorted order: tantivy sums the terms' scores in the order given, and a float sum's last bit depends
            # on it (then a tie at the window's edge); every search of the same words scores the same.
            terms = [Query.term_query(schema, "text", token) for token in sorted(node.tokens)]
            query = _at_least(terms, node.required)
            return query if node.boost == 1.0 else Query.boost_query(query, node.boost)
        if isinstance(node, Phrase):
            query = Query.phrase_query(schema, "text", list(node.tokens), node.slop)
            return query if node.boost == 1.0 else Query.boost_query(query, node.boost)
        if isinstance(node, Fuzzy):
            return fuzzy_query(schema, "text", self.text_words, node)
        if isinstance(node, PhrasePrefix):
            return phrase_prefix_query(schema, "text", self.text_words, node)
        if isinstance(node, Pattern):
            try:
                pattern = Query.regex_query(schema, node.field, node.regex)
            except ValueError as error:  # tantivy's automaton over its size limit, or a regex it cannot read
                raise QueryRefused(
                    f"the wildcard {shortened(node.wildcard)!r} cannot be searched here "
                    f"({str(error)[:120]}); use fewer ? and * in it"
                ) from None
            return Query.const_score_query(pattern, 1.0)
        if isinstance(node, Keyword):
            if node.field == "year":
                query = Query.boolean_query(
                    [
                        (Occur.Should, Query.range_query(schema, "year", tantivy.FieldType.Integer, value, value))
                        for value in node.values
                    ]
                )
            else:
                query = Query.term_set_query(schema, node.field, list(node.values))
            return Query.const_score_query(query, 1.0)
        if isinstance(node, Range):
            return Query.const_score_query(
                Query.range_query(schema, node.field, tantivy.FieldType.Integer, node.lower, node.upper), 1.0
            )
        if isinstance(node, MatchAll):
            return Query.all_query()
        if isinstance(node, MatchNone):
            return Query.empty_query()
        return self._bool(node)

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

    @cached_property
    def text_words(self) -> TermDictionary:
        """The words of the ``text`` field (those of the vocabulary with a document), which fuzzy words and a
        phrase's prefix expand to; read once per version, on its first such search (0.2 s for NFCorpus's 32k)."""
        return TermDictionary(
            word for word, frequency in zip(self._stats.vocab.terms, self._stats.df["text"]) if frequency > 0
        )

    def _bool(self, node: Bool) -> tantivy.Query:
        Query, Occur = tantivy.Query, tantivy.Occur
        clauses = [(Occur.Must, self._tantivy(child)) for child in node.must]
        clauses += [(Occur.Must, Query.const_score_query(self._tantivy(child), 0.0)) for child in node.filter]
        clauses += [(Occur.MustNot, self._tantivy(child)) for child in node.must_not]
        should = [self._tantivy(child) for child in node.should]
        positive = bool(node.must or node.filter)
        if should and (node.required_should == 0 or (node.required_should == 1 and not positive)):
            clauses += [(Occur.Should, query) for query in should]  # optional beside must/filter, else one needed
        elif should:
            clauses.append((Occur.Must, _at_least(should, node.required_should)))
        if not any(occur != Occur.MustNot for occur, _ in clauses):
            # Only exclusions (or nothing): every other document, as Elasticsearch's bool makes it.
            clauses.append(
                (Occur.Must, Query.all_query() if not clauses else Query.const_score_query(Query.all_query(), 0.0))
            )
        query = Query.boolean_query(clauses)
        return query if node.boost == 1.0 else Query.boost_query(query, node.boost)


_SHARDS = {"total": 1, "successful": 1, "skipped": 0, "failed": 0}


def _shown_bytes(stored: bytes, source: Mapping[str, Any], shown: Mapping[str, Any] | None) -> int:
    """About what a hit's ``_source`` adds to the answer: as stored when shown whole, else its fields written."""
    if shown is None:
        return 0
    if shown.keys() == source.keys():
        return len(stored)
    return len(json.dumps(shown, ensure_ascii=False))


def _at_least(queries: list[tantivy.Query], required: int) -> tantivy.Query:
    """Documents matching at least ``required`` of ``queries``, scored by the sum of those they match.

    tantivy's boolean query has no minimum-should-match, so a count between one and all
    is the disjunction of every ``required``-sized conjunction (scoring nothing) beside the
    optional clauses that score; refused above ``MAX_SHOULD_EXPANSION`` conjunctions.
    """
    Query, Occur = tantivy.Query, tantivy.Occur
    if required <= 1:
        return Query.boolean_query([(Occur.Should, query) for query in queries])
    if required >= len(queries):
        return Query.boolean_query([(Occur.Must, query) for query in queries])
    if math.comb(len(queries), required) > MAX_SHOULD_EXPANSION:
        raise QueryRefused(
            f"minimum_should_match of {required} out of {len(queries)} clauses is more than the "
            f"embedded backend expands ({MAX_SHOULD_EXPANSION} combinations); it is {ON_ELASTICSEARCH}"
        )
    enough = Query.boolean_query(
        [
            (Occur.Should, Query.boolean_query([(Occur.Must, queries[i]) for i in chosen]))
            for chosen in combinations(range(len(queries)), required)
        ]
    )
    return Query.boolean_query(
        [(Occur.Must, Query.const_score_query(enough, 0.0))] + [(Occur.Should, query) for query in queries]
    )


def _words(node: Node) -> set[str]:
    """The words of the text clauses a highlight marks (not those of must_not)."""
    if isinstance(node, (Words, Phrase)):
        return set(node.tokens)
    if isinstance(node, Fuzzy):
        return {node.token}
    if isinstance(node, PhrasePrefix):
        return set(node.tokens[:-1])
    if isinstance(node, Bool):
        return set().union(*(_words(child) for child in (*node.must, *node.should)))
    return set()


def _total_limit(track: Any) -> int | None:
    """Up to how many hits the total is exact: ``track_total_hits`` true (all), false (none: None), or a number."""
    if track is None:
        return DEFAULT_TOTAL_LIMIT
    if track is True:
        return 2**62
    if track is False:
        return None
    if isinstance(track, int) and track >= 0:
        return track
    raise QueryRefused(f"[track_total_hits] must be true, false or a whole number, got {str(track)[:40]}")


def _tantivy_aggs(plan: AggregationPlan) -> dict[str, Any]:
    """What tantivy is asked for a search's aggregations (aggregations.py)."""
    return plan.tantivy_request()


def _es_aggregations(result: Mapping[str, Any], plan: AggregationPlan) -> dict[str, Any]:
    """tantivy's aggregations as Elasticsearch answers them, the filter buckets searched (aggregations.py)."""
    return plan.answer(result)


def _empty_aggs(plan: AggregationPlan | None) -> dict[str, Any] | None:
    """The aggregations of a search of an empty index: every bucket empty, every metric over no document."""
    return plan.answer(None) if plan else None
