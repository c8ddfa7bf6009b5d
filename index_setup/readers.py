"""Corpus, query and relevance-judgment readers.

Formats:

- BEIR: ``corpus.jsonl[.gz]`` (``{"_id", "title", "text"}`` per line; ``text`` is
  the abstract), ``queries.jsonl`` (``{"_id", "text"}``), ``qrels/*.tsv`` with the
  header ``query-id corpus-id score``.
- TREC qrels: ``QID ITERATION DOCID GRADE``, whitespace separated.
- Query TSV (the original NFCorpus ``*.queries`` files): ``ID<TAB>TEXT``.
- PubMed/MEDLINE XML (``PubmedArticleSet``, ``.xml`` or ``.xml.gz``, e.g. the
  annual baseline files ``pubmed25n0001.xml.gz``), streamed with ``iterparse``:
  every finished record is cleared, so memory stays flat whatever the file size.

PubMed mapping: id = ``MedlineCitation/PMID``; title = ``Article/ArticleTitle``
(``VernacularTitle`` when that is empty), inner markup such as ``<i>`` kept as its
text; abstract = every ``Abstract/AbstractText`` section joined with a space, a
labelled section written ``LABEL: text`` -- the form PubMed's own text export and
the NFCorpus/BEIR abstracts use (``BACKGROUND: ... METHODS: ...``), so training
data and production data look alike. ``OtherAbstract`` (translations, plain
language summaries) is not used. An article without an abstract is still a
document (empty abstract). ``PubmedBookArticle`` records are read the same way
from ``BookDocument``. ``DeleteCitation`` blocks (update files) are skipped and
counted in ``LoadReport.deleted``. Whitespace runs in titles and abstracts are
collapsed to one space.

Bad data never ends in a stack trace. By default a malformed record (bad JSON line,
missing ``_id``, non-string title, ``PubmedArticle`` without PMID, ...) is skipped,
counted and described in a ``LoadReport`` -- file, line or record number, what is
wrong -- and the load goes on. An XML syntax error or a truncated ``.gz`` leaves the
rest of its file unreadable, so it raises ``DamagedFileError`` either way: indexing
part of the corpus as if it were whole would lose documents quietly. ``strict=True``
raises ``CorpusFormatError`` at the first problem instead. Pass your own
``LoadReport`` to see the problems; without one, a summary is logged at the end.
A path that does not exist raises ``CorpusNotFoundError``.

Readers do not remove duplicate document ids: a PubMed update file legitimately
repeats a PMID to revise it, so the consumer decides (last one wins, usually).
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator, NamedTuple
from xml.etree import ElementTree

from es_rerank.stats import Document

logger = logging.getLogger(__name__)

BEIR_CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
_JSON_LINES_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
PUBMED_ROOT = "PubmedArticleSet"
_PUBMED_RECORDS = ("PubmedArticle", "PubmedBookArticle", "DeleteCitation")
_LOGGED_PROBLEMS = 20  # problems logged one by one; the rest only counted
MAX_GRADE = 1000  # qrels grades beyond this are not relevance grades (TREC and NFCorpus use 0-4)
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


class CorpusNotFoundError(FileNotFoundError):
    """A corpus, queries or qrels path does not exist, holds no known format, or holds two corpora."""


class CorpusFormatError(ValueError):
    """A record or file that cannot be read, at ``path`` and ``location``."""

    def __init__(self, path: Path | str, location: str, message: str) -> None:
        self.path = str(path)
        self.location = location
        self.message = message
        super().__init__(f"{self.path}, {location}: {message}")


class DamagedFileError(CorpusFormatError):
    """A file whose rest cannot be read (a truncated gzip stream, broken XML): never skipped.

    Skipping it would index part of the corpus and serve that as if it were whole, so the
    load stops with or without --strict.
    """


class LoadProblem(NamedTuple):
    """One skipped record: the file, where in it (``line 12``, ``record 3``), what."""

    path: str
    location: str
    message: str


@dataclass
class LoadReport:
    """Counts of a load, and the problems met (the first ``max_problems`` of them)."""

    read: int = 0  # records returned
    skipped: int = 0  # malformed records skipped
    deleted: int = 0  # PubMed DeleteCitation PMIDs seen (and skipped)
    problems: list[LoadProblem] = field(default_factory=list)
    max_problems: int = 1000

    def add_problem(self, path: Path | str, location: str, message: str) -> None:
        """Count one skipped record and keep its description."""
        self.skipped += 1
        problem = LoadProblem(str(path), location, message)
        if len(self.problems) < self.max_problems:
            self.problems.append(problem)
        if self.skipped <= _LOGGED_PROBLEMS:
            logger.warning("skipped %s, %s: %s", *problem)

    def summary(self) -> str:
        """One line: what was read and what was skipped."""
        text = f"read {self.read} records, skipped {self.skipped} malformed"
        if self.deleted:
            text += f", {self.deleted} deleted citations ignored"
        if self.problems:
            first = self.problems[0]
            text += f" (first: {first.path}, {first.location}: {first.message})"
        return text


def _problem(report: LoadReport, strict: bool, path: Path, location: str, message: str) -> None:
    if strict:
        raise CorpusFormatError(path, location, message)
    report.add_problem(path, location, message)


def _require_file(path: Path, expected: str) -> Path:
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise CorpusNotFoundError(f"{path} {what}; expected {expected}")
    return path


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def _numbered_lines(path: Path, report: LoadReport, strict: bool) -> Iterator[tuple[int, str]]:
    """(line number, decoded line) of a text file, plain or gzip; blank lines left out.

    Lines are decoded one by one so a bad byte costs one line, not the file; a
    truncated or corrupt ``.gz`` raises ``DamagedFileError``.
    """
    number = 0
    try:
        with _open_binary(path) as stream:
            for number, raw in enumerate(stream, start=1):
                try:
                    # utf-8-sig on the first line: editors on Windows start files with a byte-order mark.
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as error:
                    _problem(report, strict, path, f"line {number}",
                             f"not UTF-8 text ({error.reason} at byte {error.start}); "
                             "re-encode the file as UTF-8")
                    continue
                if line.strip():
                    yield number, line
    except _GZIP_ERRORS as error:
        raise DamagedFileError(path, f"after line {number}",
                               f"the gzip stream is truncated or corrupt ({error}); download or compress the "
                               "file again") from None


def _json_object(path: Path, number: int, line: str, report: LoadReport, strict: bool) -> dict | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        _problem(report, strict, path, f"line {number}", f"not valid JSON ({error.msg} at column "
                 f"{error.colno}); each line must hold one JSON object")
        return None
    if not isinstance(record, dict):
        _problem(report, strict, path, f"line {number}",
                 f"expected a JSON object, found {type(record).__name__}")
        return None
    return record


def _record_id(path: Path, number: int, record: dict, report: LoadReport, strict: bool) -> str | None:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        found = "no \"_id\"" if value is None else f"\"_id\" = {value!r}"
        _problem(report, strict, path, f"line {number}",
                 f"{found}; every record needs a non-empty string \"_id\"")
        return None
    if problem := _id_problem(str(value)):
        _problem(report, strict, path, f"line {number}", f"\"_id\": {problem}")
        return None
    return str(value)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins valid pairs: any left is unpaired


def _id_problem(value: str) -> str | None:
    """What is wrong with an id (whitespace, or half a UTF-16 pair), or None.

    Ids are stored one per line in the statistics and written into space-separated
    TREC runs, so a space, tab or line break in one would corrupt both; an unpaired
    surrogate (a JSON escape such as \\ud800) is not text any file can store.
    """
    if any(character.isspace() for character in value):
        return f"{value!r} contains whitespace; use ids without spaces, tabs or line breaks"
    if _LONE_SURROGATE.search(value):
        return f"{value!r} holds an unpaired UTF-16 surrogate escape (such as \\ud800); write it as valid Unicode"
    return None


def _string_field(path: Path, number: int, record: dict, name: str,
                  report: LoadReport, strict: bool) -> str | None:
    """A text field; absent or null reads as empty, any other non-string is a problem."""
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        _problem(report, strict, path, f"line {number}",
                 f"\"{name}\" is a {type(value).__name__} ({str(value)[:40]!r}), expected a string")
        return None
    # JSON can spell half a UTF-16 pair (\ud800) that no file can store; the index refuses it,
    # so it becomes U+FFFD, as a decoder replaces bytes that are not text.
    return _LONE_SURROGATE.sub("\ufffd", value)


def _report_to_fill(report: LoadReport | None) -> tuple[LoadReport, bool]:
    """The caller's report, or a new one that the reader logs itself when it is done (the bool)."""
    return (LoadReport(), True) if report is None else (report, False)


def _finish(report: LoadReport, own_report: bool, what: str) -> None:
    if own_report and (report.skipped or report.deleted):
        logger.warning("%s: %s", what, report.summary())


def read_beir_corpus(path: Path, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
    """Stream documents from a BEIR ``corpus.jsonl[.gz]`` (``text`` is the abstract)."""
    path = _require_file(path, "a BEIR corpus file corpus.jsonl[.gz] with one "
                               '{"_id", "title", "text"} object per line')
    return _beir_corpus(path, strict, report)


def _beir_corpus(path: Path, strict: bool, report: LoadReport | None) -> Iterator[Document]:
    report, own_report = _report_to_fill(report)
    for number, line in _numbered_lines(path, report, strict):
        record = _json_object(path, number, line, report, strict)
        if record is None:
            continue
        doc_id = _record_id(path, number, record, report, strict)
        if doc_id is None:
            continue
        title = _string_field(path, number, record, "title", report, strict)
        if title is None:
            continue
        abstract = _string_field(path, number, record, "text", report, strict)
        if abstract is None:
            continue
        report.read += 1
        yield Document(doc_id, title, abstract)
    _finish(report, own_report, str(path))


def read_queries(path: Path, strict: bool = False, report: LoadReport | None = None) -> dict[str, str]:
    """Query id -> text from a BEIR ``queries.jsonl[.gz]`` or an ``ID<TAB>TEXT`` file.

    A repeated query id is a problem; the first text is kept.
    """
    path = _require_file(path, "a BEIR queries.jsonl with one {\"_id\", \"text\"} object per "
                               "line, or a TSV file of ID<TAB>TEXT lines")
    report, own_report = _report_to_fill(report)
    is_jsonl = path.name.lower().endswith(_JSON_LINES_SUFFIXES)
    queries: dict[str, str] = {}
    for number, line in _numbered_lines(path, report, strict):
        if is_jsonl:
            record = _json_object(path, number, line, report, strict)
            if record is None:
                continue
            query_id = _record_id(path, number, record, report, strict)
            text = None if query_id is None else _string_field(path, number, record, "text", report, strict)
        else:
            query_id, tab, text = line.rstrip("\r\n").partition("\t")
            if not tab or not query_id.strip():
                _problem(report, strict, path, f"line {number}",
                         "expected ID<TAB>TEXT (a tab-separated query id and query text)")
                continue
            query_id, text = query_id.strip(), text.strip()
            if problem := _id_problem(query_id):
                _problem(report, strict, path, f"line {number}", f"query id {problem}")
                continue
        if query_id is None or text is None:
            continue
        if query_id in queries:
            _problem(report, strict, path, f"line {number}",
                     f"query id {query_id!r} appears again; each query id must be unique")
            continue
        queries[query_id] = text
        report.read += 1
    _finish(report, own_report, str(path))
    return queries


def _integer(text: str) -> int | None:
    """``2`` or ``2.0`` as 2; anything else None."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def read_qrels(path: Path, strict: bool = False, report: LoadReport | None = None) -> dict[str, dict[str, int]]:
    """Query id -> {doc id: grade} from a BEIR ``qrels/*.tsv`` or a TREC qrels file.

    BEIR lines are ``query-id corpus-id score`` (a first line holding those names
    is the header); TREC lines are ``QID ITERATION DOCID GRADE``. Columns may be
    separated by tabs or spaces. A pair judged twice with different grades is a
    problem; the first grade is kept.
    """
    path = _require_file(path, "a qrels file: BEIR TSV lines 'query-id<TAB>corpus-id<TAB>score' "
                               "or TREC lines 'QID 0 DOCID GRADE'")
    report, own_report = _report_to_fill(report)
    qrels: dict[str, dict[str, int]] = {}
    first = True
    for number, line in _numbered_lines(path, report, strict):
        parts = line.split()
        if first and parts[:2] == ["query-id", "corpus-id"]:
            first = False
            continue
        first = False
        if len(parts) == 4:
            qid, _, doc_id, grade_text = parts
        elif len(parts) == 3:
            qid, doc_id, grade_text = parts
        else:
            _problem(report, strict, path, f"line {number}",
                     f"{len(parts)} columns; expected 3 (query-id corpus-id score) "
                     "or 4 (QID ITERATION DOCID GRADE)")
            continue
        grade = _integer(grade_text)
        if grade is None:
            _problem(report, strict, path, f"line {number}",
                     f"grade {grade_text!r} is not an integer")
            continue
        if abs(grade) > MAX_GRADE:
            _problem(report, strict, path, f"line {number}",
                     f"grade {grade_text[:20]!r} is outside -{MAX_GRADE}..{MAX_GRADE}; relevance grades are small "
                     "integers (NFCorpus: 0-2)")
            continue
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            if judged[doc_id] != grade:
                _problem(report, strict, path, f"line {number}",
                         f"({qid}, {doc_id}) judged again with grade {grade} after {judged[doc_id]}; "
                         "keep one judgment per pair")
            continue  # the same judgment repeated: read once
        judged[doc_id] = grade
        report.read += 1
    _finish(report, own_report, str(path))
    return qrels


# --- PubMed XML ------------------------------------------------------------------

def _text_of(element: ElementTree.Element | None) -> str:
    """All text inside an element (inner markup kept as text), whitespace collapsed."""
    if element is None:
        return ""
    return " ".join("".join(element.itertext()).split())


def _abstract_of(abstract: ElementTree.Element | None) -> str:
    if abstract is None:
        return ""
    sections = []
    for section in abstract.iterfind("AbstractText"):
        text = _text_of(section)
        label = (section.get("Label") or "").strip()
        if label and text:
            text = f"{label}: {text}"
        if text:
            sections.append(text)
    return " ".join(sections)


def _pubmed_document(record: ElementTree.Element) -> tuple[Document | None, str]:
    """The document of a PubmedArticle / PubmedBookArticle, or (None, what is missing)."""
    if record.tag == "PubmedArticle":
        citation = record.find("MedlineCitation")
        if citation is None:
            return None, "PubmedArticle without MedlineCitation"
        pmid = _text_of(citation.find("PMID"))
        if not pmid:
            return None, "PubmedArticle without MedlineCitation/PMID"
        article = citation.find("Article")
        if article is None:
            return Document(pmid, "", ""), ""
        title = _text_of(article.find("ArticleTitle")) or _text_of(article.find("VernacularTitle"))
        return Document(pmid, title, _abstract_of(article.find("Abstract"))), ""
    book = record.find("BookDocument")
    pmid = _text_of(book.find("PMID")) if book is not None else ""
    if not pmid:
        return None, "PubmedBookArticle without BookDocument/PMID"
    title = _text_of(book.find("ArticleTitle")) or _text_of(book.find("Book/BookTitle"))
    return Document(pmid, title, _abstract_of(book.find("Abstract"))), ""


def read_pubmed_xml(path: Path, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
    """Stream documents from one PubMed/MEDLINE XML file (``.xml`` or ``.xml.gz``)."""
    path = _require_file(path, "a PubMed/MEDLINE XML file (<PubmedArticleSet>, .xml or .xml.gz)")
    return _pubmed_xml(path, strict, report)


def _pubmed_xml(path: Path, strict: bool, report: LoadReport | None) -> Iterator[Document]:
    report, own_report = _report_to_fill(report)
    record_number = 0
    root: ElementTree.Element | None = None
    try:
        with _open_binary(path) as stream:
            for event, element in ElementTree.iterparse(stream, events=("start", "end")):
                if root is None:
                    root = element
                    if root.tag != PUBMED_ROOT:
                        _problem(report, strict, path, "line 1",
                                 f"root element is <{root.tag}>, expected <{PUBMED_ROOT}>; "
                                 "this is not a PubMed/MEDLINE XML file, so it was not read")
                        return
                    continue
                if event != "end" or element.tag not in _PUBMED_RECORDS:
                    continue
                record_number += 1
                if element.tag == "DeleteCitation":
                    report.deleted += len(element.findall("PMID"))
                else:
                    document, missing = _pubmed_document(element)
                    if document is None:
                        _problem(report, strict, path, f"record {record_number}",
                                 f"{missing}; a PubMed record needs its PMID")
                    elif problem := _id_problem(document.doc_id):
                        _problem(report, strict, path, f"record {record_number}", f"PMID {problem}")
                    else:
                        report.read += 1
                        yield document
                root.clear()  # drop the finished record (and any before it)
    except ElementTree.ParseError as error:
        line, column = error.position
        reason = str(error).rsplit(": line", 1)[0]  # the position is in the location already
        raise DamagedFileError(path, f"line {line}, column {column}",
                               f"XML syntax error after record {record_number} ({reason}); download the file "
                               "again") from None
    except _GZIP_ERRORS as error:
        raise DamagedFileError(path, f"after record {record_number}",
                               f"the gzip stream is truncated or corrupt ({error}); download the file "
                               "again") from None
    finally:
        if root is not None:
            root.clear()
    _finish(report, own_report, str(path))


def pubmed_files(directory: Path) -> list[Path]:
    """The PubMed baseline/update files of a directory (``pubmed*.xml[.gz]``), sorted by name.

    Where both ``X.xml`` and ``X.xml.gz`` are there, only the ``.gz`` is read.
    """
    gz = sorted(directory.glob("pubmed*.xml.gz"))
    stems = {p.name[:-3] for p in gz}
    plain = [p for p in directory.glob("pubmed*.xml") if p.name not in stems]
    return sorted(gz + plain, key=lambda p: p.name)


def _chain(readers: Iterable[Iterator[Document]], report: LoadReport, own_report: bool,
           what: str) -> Iterator[Document]:
    for reader in readers:
        yield from reader
    _finish(report, own_report, what)


def beir_corpus_file(directory: Path) -> Path | None:
    """The one ``corpus.jsonl[.gz]`` in a BEIR ``directory``, None if it has none; two are an error."""
    found = [directory / name for name in BEIR_CORPUS_NAMES if (directory / name).is_file()]
    if len(found) > 1:  # a stale copy beside a fresh one: loading either could be the wrong corpus
        raise CorpusNotFoundError(f"{directory} holds both {' and '.join(f.name for f in found)}; pass the one to "
                                  f"load with --data {found[0]} (or {found[1].name}), or remove the other")
    return found[0] if found else None


def read_corpus(path: Path, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
    """Stream the documents at ``path``, whatever the format.

    ``path`` may be a BEIR directory (``corpus.jsonl`` or ``corpus.jsonl.gz``
    inside), a ``.jsonl[.gz]`` file, a PubMed ``.xml[.gz]`` file, or a directory
    of PubMed baseline files (``pubmed*.xml[.gz]``, read in name order). The path
    is checked now; the documents come as the iterator is consumed.
    """
    path = Path(path)
    expected = ("a BEIR directory (corpus.jsonl[.gz] inside), a corpus .jsonl[.gz] file, a PubMed "
                ".xml[.gz] file or a directory of PubMed baseline files pubmed*.xml[.gz]")
    if not path.exists():
        raise CorpusNotFoundError(f"{path} does not exist; expected {expected}")
    if path.is_dir():
        beir = beir_corpus_file(path)
        if beir is not None:
            return _beir_corpus(beir, strict, report)
        files = pubmed_files(path)
        if not files:
            raise CorpusNotFoundError(f"{path} holds neither corpus.jsonl[.gz] nor pubmed*.xml[.gz] "
                                      f"files; expected {expected}")
        report, own_report = _report_to_fill(report)
        # Each file's reader shares the report; the summary is logged once, at the end.
        return _chain((_pubmed_xml(f, strict, report) for f in files), report, own_report, str(path))
    name = path.name.lower()
    if name.endswith(_JSON_LINES_SUFFIXES):
        return _beir_corpus(path, strict, report)
    if name.endswith((".xml", ".xml.gz")):
        return _pubmed_xml(path, strict, report)
    raise CorpusNotFoundError(f"{path}: unknown corpus format (by its name); expected {expected}")
