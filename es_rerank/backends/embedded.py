"""The embedded BM25 backend: a tantivy index directory plus its term statistics.

Zero set-up: no server, the index is a directory under ``ESRR_HOME``. Documents
are indexed pre-tokenized by ``es_rerank.text.tokenize`` (joined by spaces and
split again by tantivy's whitespace tokenizer), so BM25 sees exactly our tokens;
tantivy's BM25 is Lucene's (k1 1.2, b 0.75). Each version lives in its own
directory and ``CURRENT`` names the one being served, swapped atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

import tantivy

from es_rerank.backends.base import BackendError, Hit, check_k
from es_rerank.settings import missing_from_home
from es_rerank.stats import CorpusStats, StatsError, saved_build_id
from es_rerank.text import tokenize
from es_rerank.versions import CURRENT_FILE, VersionNameError, read_pointer

TOKENIZER = "esrr_pretokenized"
_TIE_MARGIN = 64


def whitespace_analyzer() -> tantivy.TextAnalyzer:
    """Tantivy analyzer that splits our pre-tokenized text on spaces only."""
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build()


def index_schema() -> tantivy.Schema:
    """One BM25 field (title + abstract tokens), the stats row, and stored display fields."""
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    builder.add_integer_field("row", stored=False, indexed=False, fast=True)
    builder.add_text_field("doc_id", stored=True, tokenizer_name="raw", index_option="basic")
    builder.add_text_field("title", stored=True, tokenizer_name="raw", index_option="basic")
    return builder.build()


def current_version(root: Path) -> str:
    """The version named by ``root/CURRENT``."""
    try:
        version = read_pointer(root)
    except VersionNameError as error:
        raise BackendError(f"{error} (`esrr index use VERSION`, see `esrr index versions`)") from None
    if version is None and not (root / CURRENT_FILE).is_file():
        raise BackendError(missing_from_home(f"no embedded index in {Path(root).absolute()}",
                                             "build one there with `esrr index build`"))
    if version is None:
        raise BackendError(f"{root / CURRENT_FILE} is empty; serve a version with `esrr index use VERSION` "
                           "(see `esrr index versions`) or build one with `esrr index build`")
    return version


class EmbeddedBackend:
    """BM25 top-k over an embedded tantivy index, with each hit's precomputed data."""

    def __init__(self, version_dir: Path, check_ids: bool = False) -> None:
        self.version_dir = version_dir
        meta_path = version_dir / "meta.json"
        if not meta_path.is_file():
            raise BackendError(f"{version_dir} is not a complete embedded index; build one with "
                               "`esrr index build` or serve another version with `esrr index use VERSION` "
                               "(`esrr index versions` lists them)")
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise BackendError(f"{meta_path} is damaged ({type(error).__name__}: {error}); rebuild the index "
                               "(`esrr index build`) or serve another version (`esrr index use`)") from None
        # A damaged copy (statistics or tantivy files missing) is a BackendError like
        # a missing meta.json, so callers that handle one handle all.
        try:
            self._stats = CorpusStats.load(version_dir / "stats", check_ids=check_ids)
        except StatsError as error:
            raise BackendError(f"{error} (index version {version_dir.name})") from None
        self._schema = index_schema()
        try:
            self._index = tantivy.Index.open(str(version_dir / "tantivy"))
            self._index.register_tokenizer(TOKENIZER, whitespace_analyzer())
            self._searcher = self._index.searcher()
        except ValueError as error:
            if "Lockfile" in str(error):  # tantivy writes lock files even to read
                raise BackendError(f"cannot open the tantivy index of {version_dir} ({error}): tantivy needs "
                                   "to write lock files there; make ESRR_HOME writable") from None
            raise BackendError(f"cannot open the tantivy index of {version_dir} ({error}); it is "
                               "incomplete or damaged: rebuild it with `esrr index build` or serve "
                               "another version with `esrr index use VERSION`") from None

    @classmethod
    def open_current(cls, root: Path) -> "EmbeddedBackend":
        """Open the version that ``root/CURRENT`` points at."""
        return cls(root / current_version(root))

    @property
    def version(self) -> str:
        """The served index version (its statistics' version)."""
        return self._stats.version

    def current(self) -> "EmbeddedBackend":
        """This backend while ``CURRENT`` still names its folder and build, else the version it names now, opened.

        The build id tells a folder rebuilt under the same name (after a prune freed it) from this one.
        """
        root = self.version_dir.parent
        version = current_version(root)
        if version == self.version_dir.name and saved_build_id(self.version_dir / "stats") == self._stats.build_id:
            return self
        return EmbeddedBackend(root / version)

    @property
    def index(self) -> str:
        """The name of the index being searched: its version (a directory under the embedded root)."""
        return self._stats.version

    @property
    def stats(self) -> CorpusStats:
        """The served index's term statistics."""
        return self._stats

    def search(self, query: str, k: int) -> list[Hit]:
        """Top-``k`` hits by BM25, best first; equal scores ordered by ascending doc id."""
        check_k(k)
        if (change := self._stats.changed_files()) is not None:  # before a read that a cut file would end in SIGBUS
            raise BackendError(change)
        terms = sorted(set(tokenize(query)))
        if not terms or self._stats.n_docs == 0:  # tantivy panics on a search limit of 0
            return []
        bm25 = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "text", t)) for t in terms]
        )
        limit = min(k + _TIE_MARGIN, self._stats.n_docs)
        while True:
            scored = self._searcher.search(bm25, limit, count=False).hits
            # Fetch more while a tie at the cut-off could continue past what was fetched.
            if len(scored) < limit or limit >= self._stats.n_docs or scored[min(k, len(scored)) - 1][0] > scored[-1][0]:
                break
            limit *= 2
        rows = self._searcher.fast_field_values("row", [address for _, address in scored])
        doc_ids = self._stats.doc_ids_at(rows)  # together, once each: a lookup per hit was a fifth of a search
        ranked = sorted(range(len(scored)), key=lambda i: (-scored[i][0], doc_ids[i]))[:k]
        # Stored fields and precomputed data only for the hits returned, not the tie margin.
        terms = self._stats.doc_terms_at([rows[i] for i in ranked])
        return [Hit(doc_ids[i], float(scored[i][0]), self._searcher.doc(scored[i][1])["title"][0], data)
                for i, data in zip(ranked, terms)]
