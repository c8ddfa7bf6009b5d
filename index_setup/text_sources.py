"""Readers for every biomedical text source in ``../shared/data`` (word2vec input).

Each source has its own format (see the ``PROVENANCE.md`` beside each file); the
readers turn them all into ``TextDoc``: a source name, an id and the text as an
ordered tuple of parts (title, abstract or abstract sections, body sections).

| source name          | file(s)                                   | parts                          |
|----------------------|-------------------------------------------|--------------------------------|
| ``nfcorpus``         | ``nfcorpus/corpus.jsonl.gz`` (BEIR)       | title, abstract                |
| ``ohsumed``          | ``ohsumed-single23/docs.jsonl.gz``        | title, abstract                |
| ``medical-abstracts``| ``medical-abstracts-tc/medical_tc_test.csv.gz`` | title+abstract run together |
| ``bc5cdr``           | ``bc5cdr/*.PubTator.txt``                 | title, abstract                |
| ``evidence-inference``| ``evidence-inference-pmc/docs.jsonl.gz`` | title, abstract + body sections|

Deduplication (``Deduplicator``): a document is dropped when the hash of its
normalised text (lower-cased word characters joined by single spaces) was seen
before, in any source. Sources are read in the order above, so the first copy
wins: the medical-abstracts rows that repeat OHSUMED documents are dropped, as are
duplicates inside one source. Measured on the shared data (26,107 records): 797
medical-abstracts rows equal an OHSUMED text (the README's 756 counts title
matches only) and 118 more repeat another row of their own file; 40 NFCorpus
docs repeat another NFCorpus doc; 1 OHSUMED doc repeats an NFCorpus doc, 4
BC5CDR docs repeat OHSUMED/medical-abstracts ones; one evidence-inference record
(PMC2206488) has no text and is skipped. 18,930 documents remain (nfcorpus 3,593, ohsumed 7,399,
medical-abstracts 1,973, bc5cdr 1,496, evidence-inference 4,469).

The embedding path (``sentences``) splits every part into sentences with a simple
rule (``.``, ``!`` or ``?`` then whitespace then an upper-case letter, digit or
opening bracket, or a line break): the paper's word2vec "processed the tokenized
documents in sentences" (section 4.1). A wrongly split abbreviation (``Fig. 2``)
only shortens one context window. Each sentence becomes
``embedding_tokens(tokenize(sentence))`` and is cut into chunks of at most
``MAX_SENTENCE_TOKENS`` (gensim ignores words past 10,000 in one sentence).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from es_rerank.text import embedding_tokens, tokenize
from index_setup.readers import CorpusFormatError, read_beir_corpus

MAX_SENTENCE_TOKENS = 10_000  # gensim's MAX_WORDS_IN_BATCH: longer sentences are truncated

_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])|\s*[\r\n]+\s*")
_WORD_RE = re.compile(r"\w+")


class TextSourceError(Exception):
    """A text source is missing or malformed; the message names the file."""


@dataclass(frozen=True)
class TextDoc:
    """One document of a text source: its parts in reading order."""

    source: str
    doc_id: str
    parts: tuple[str, ...]

    @property
    def text(self) -> str:
        """The non-empty parts joined by line breaks."""
        return "\n".join(p for p in self.parts if p)


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def _jsonl(path: Path) -> Iterator[dict]:
    with _open_text(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise TextSourceError(f"{path}:{number}: not a JSON line ({exc})") from exc


def read_nfcorpus(path: Path) -> Iterator[TextDoc]:
    """NFCorpus / any BEIR ``corpus.jsonl[.gz]`` through the index's strict BEIR reader."""
    try:
        for doc in read_beir_corpus(path, strict=True):
            yield TextDoc("nfcorpus", doc.doc_id, (doc.title, doc.abstract))
    except CorpusFormatError as exc:
        raise TextSourceError(format_error_message(exc)) from exc


def format_error_message(error: CorpusFormatError) -> str:
    """A reader's error with the fix for word2vec's sources."""
    return f"{error}; fix or replace the file (word2vec reads it strictly)"


def read_ohsumed(path: Path) -> Iterator[TextDoc]:
    """OHSUMED single-23 ``docs.jsonl.gz``: ``{"id", "title", "abstract", ...}``."""
    for r in _jsonl(path):
        yield TextDoc("ohsumed", str(r["id"]), (r.get("title") or "", r.get("abstract") or ""))


def read_medical_abstracts(path: Path) -> Iterator[TextDoc]:
    """Medical-abstracts TC CSV ``condition_label,medical_abstract`` (title run into abstract)."""
    with _open_text(path) as lines:
        reader = csv.DictReader(lines)
        if reader.fieldnames is None or "medical_abstract" not in reader.fieldnames:
            raise TextSourceError(f"{path}: expected a CSV header with a 'medical_abstract' column")
        for row_number, row in enumerate(reader, 1):
            yield TextDoc("medical-abstracts", f"{path.name}#{row_number}", (row["medical_abstract"] or "",))


def read_pubtator(path: Path) -> Iterator[TextDoc]:
    """PubTator ``PMID|t|title`` / ``PMID|a|abstract`` blocks; annotation lines are skipped."""
    pmid, title, abstract = None, "", ""
    with _open_text(path) as lines:
        for line in lines:
            line = line.rstrip("\r\n")
            head = line[:40]
            if "|t|" in head:
                if pmid is not None:
                    yield TextDoc("bc5cdr", pmid, (title, abstract))
                pmid, _, title = line.split("|", 2)
                abstract = ""
            elif "|a|" in head:
                _, _, abstract = line.split("|", 2)
    if pmid is not None:
        yield TextDoc("bc5cdr", pmid, (title, abstract))


def read_evidence_inference(path: Path) -> Iterator[TextDoc]:
    """Evidence-inference PMC ``docs.jsonl.gz``: title, abstract sections, body sections."""
    for r in _jsonl(path):
        sections = [text for _, text in r.get("abstract_sections") or []]
        if not sections and r.get("abstract"):
            sections = [r["abstract"]]
        body = [text for _, text in r.get("body_sections") or []]
        yield TextDoc("evidence-inference", str(r["pmcid"]), (r.get("title") or "", *sections, *body))


@dataclass(frozen=True)
class Source:
    """A named source: a glob under the data root and the reader of each file."""

    name: str
    pattern: str
    reader: Callable[[Path], Iterator[TextDoc]]

    def files(self, data_root: Path) -> list[Path]:
        """This source's files under ``data_root``, sorted."""
        return sorted(data_root.glob(self.pattern))


SOURCES: tuple[Source, ...] = (
    Source("nfcorpus", "nfcorpus/corpus.jsonl.gz", read_nfcorpus),
    Source("ohsumed", "ohsumed-single23/docs.jsonl.gz", read_ohsumed),
    Source("medical-abstracts", "medical-abstracts-tc/medical_tc_test.csv.gz", read_medical_abstracts),
    Source("bc5cdr", "bc5cdr/*.PubTator.txt", read_pubtator),
    Source("evidence-inference", "evidence-inference-pmc/docs.jsonl.gz", read_evidence_inference),
)


def normalised_hash(text: str) -> bytes:
    """Hash of the text's lower-cased word characters (punctuation and spacing ignored)."""
    return hashlib.blake2b(" ".join(_WORD_RE.findall(text.lower())).encode(), digest_size=16).digest()


@dataclass
class Deduplicator:
    """Remembers normalised-text hashes; counts what it keeps and drops per source."""

    seen: set[bytes] = field(default_factory=set)
    kept: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def is_new(self, doc: TextDoc) -> bool:
        """Whether ``doc``'s normalised text was not seen before (and remember it)."""
        key = normalised_hash(doc.text)
        if key in self.seen:
            self.dropped[doc.source] = self.dropped.get(doc.source, 0) + 1
            return False
        self.seen.add(key)
        self.kept[doc.source] = self.kept.get(doc.source, 0) + 1
        return True


def iter_documents(
    data_root: Path,
    sources: Sequence[Source] = SOURCES,
    limit_docs: int | None = None,
    dedup: Deduplicator | None = None,
) -> Iterator[TextDoc]:
    """Deduplicated, non-empty documents of every source, in ``sources`` order.

    ``limit_docs`` caps the documents taken from each source (quick runs). Raises
    ``TextSourceError`` when no source file exists under ``data_root``.
    """
    data_root = Path(data_root)
    found = {s.name: s.files(data_root) for s in sources}
    if not any(found.values()):
        names = ", ".join(f"{s.pattern}" for s in sources)
        raise TextSourceError(f"no text source under {data_root} (looked for {names}); pass --data DIR")
    dedup = dedup if dedup is not None else Deduplicator()
    for source in sources:
        taken = 0
        for path in found[source.name]:
            for doc in _read_file(source, path):
                if limit_docs is not None and taken >= limit_docs:
                    break
                if not doc.text.strip() or not dedup.is_new(doc):
                    continue
                taken += 1
                yield doc


def _read_file(source: Source, path: Path) -> Iterator[TextDoc]:
    """``source.reader(path)``, with a damaged file (truncated gzip, bad bytes, a record without its id)
    reported as a ``TextSourceError`` naming the file, not a traceback."""
    try:
        yield from source.reader(path)
    except TextSourceError:
        raise
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError) as error:
        problem = f"missing field {error}" if isinstance(error, KeyError) else f"{type(error).__name__}: {error}"
        raise TextSourceError(
            f"{path}: cannot read it as {source.name} data ({problem}); fix or replace "
            "the file (word2vec reads it strictly)"
        ) from error


def split_sentences(text: str) -> list[str]:
    """Split text at sentence ends and line breaks (see the module docstring)."""
    return [s for s in _SENTENCE_END_RE.split(text) if s]


def _chunks(tokens: list[str], size: int = MAX_SENTENCE_TOKENS) -> Iterator[list[str]]:
    for start in range(0, len(tokens), size):
        yield tokens[start : start + size]


def sentences(doc: TextDoc) -> Iterator[list[str]]:
    """Embedding-path token lists, one per sentence of the document."""
    for part in doc.parts:
        for sentence in split_sentences(part):
            tokens = embedding_tokens(tokenize(sentence))
            if tokens:
                yield from _chunks(tokens)


def document_tokens(doc: TextDoc) -> Iterator[list[str]]:
    """Embedding-path tokens of the whole document, in chunks of <= MAX_SENTENCE_TOKENS."""
    tokens = [t for part in doc.parts for t in embedding_tokens(tokenize(part))]
    yield from _chunks(tokens)


def iter_token_lists(docs: Iterable[TextDoc], unit: str = "sentence") -> Iterator[tuple[TextDoc, list[str]]]:
    """(document, token list) pairs: sentences or whole documents of ``docs``."""
    split = sentences if unit == "sentence" else document_tokens
    for doc in docs:
        for tokens in split(doc):
            yield doc, tokens
