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
language summaries) is not used. Metadata: journal = ``Journal/Title``; year =
``PubDate/Year`` (else the first year of ``MedlineDate``); authors "LastName
Initials" (or a ``CollectiveName``); MeSH = each heading's ``DescriptorName``;
publication types; DOI = ``ELocationID`` or ``PubmedData``'s ``ArticleId`` of
type doi. A BEIR record's ``metadata`` object passes through. An article without an abstract is still a
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

A corpus load never yields one document id twice: a repeated id is a problem
like a malformed record (skipped with its file and line, the first kept; fatal
with ``strict``). The ids seen are kept as 8-byte keys in numpy arrays
(``es_rerank.string_table.KeySet``), not as Python strings, so the check costs the
same per document at any corpus size. JSON lines nested too deep for the parser
or holding integers of more than 4,300 digits are malformed records too.

PubMed baseline + updates: a directory laid out like NLM's FTP site, with
``baseline/`` and ``updatefiles/`` folders of ``pubmed*.xml[.gz]``, loads the
baseline files, then the update files, in name order, and ends with what PubMed
holds after the updates: a later version of a PMID replaces the earlier one (the
document comes where its last version is), ``DeleteCitation`` removes it. The
update files are scanned once first for their PMIDs (a small share of the
corpus; kept as numpy arrays) so that no document is yielded and then withdrawn.
``LoadReport`` counts ``added``, ``replaced`` and ``removed``. A flat directory
of ``pubmed*.xml[.gz]`` files is read as baseline files only: there a repeated
PMID is a duplicate (the first kept) and ``DeleteCitation`` is counted, not
applied.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import re
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from xml.etree import ElementTree

import numpy as np

from es_rerank.stats import Document
from es_rerank.string_table import KeySet, string_key

logger = logging.getLogger(__name__)

BEIR_CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
_JSON_LINES_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
PUBMED_ROOT = "PubmedArticleSet"
_PUBMED_RECORDS = ("PubmedArticle", "PubmedBookArticle", "DeleteCitation")
_LOGGED_PROBLEMS = 20  # problems logged one by one; the rest only counted
MAX_ID_BYTES = 512  # Elasticsearch refuses longer _id values
BASELINE_DIR, UPDATES_DIR = "baseline", "updatefiles"
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
    skipped: int = 0  # malformed records skipped (repeated ids included)
    deleted: int = 0  # PubMed DeleteCitation PMIDs seen
    added: int = 0  # baseline + updates loads: documents whose PMID had no earlier version
    replaced: int = 0  # ... documents that replace an earlier version of their PMID
    removed: int = 0  # ... PMIDs that a DeleteCitation removed
    updates: bool = False  # whether the load applied update files
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
        if self.updates:
            text += (
                f"; baseline + updates: {self.added} added, {self.replaced} replaced, {self.removed} "
                f"removed by DeleteCitation"
            )
        elif self.deleted:
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


def _open_binary(path: Path) -> io.BufferedIOBase:
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
                    _problem(
                        report,
                        strict,
                        path,
                        f"line {number}",
                        f"not UTF-8 text ({error.reason} at byte {error.start}); re-encode the file as UTF-8",
                    )
                    continue
                if line.strip():
                    yield number, line
    except _GZIP_ERRORS as error:
        raise DamagedFileError(
            path,
            f"after line {number}",
            f"the gzip stream is truncated or corrupt ({error}); download or compress the file again",
        ) from None


def _json_object(path: Path, number: int, line: str, report: LoadReport, strict: bool) -> dict | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        _problem(
            report,
            strict,
            path,
            f"line {number}",
            f"not valid JSON ({error.msg} at column {error.colno}); each line must hold one JSON object",
        )
        return None
    except RecursionError:
        _problem(
            report,
            strict,
            path,
            f"line {number}",
            'JSON nested deeper than the parser allows; a record holds a flat object: "_id", "title", "text"',
        )
        return None
    except ValueError as error:  # an integer of more than 4,300 digits (sys.int_info.default_max_str_digits)
        _problem(
            report,
            strict,
            path,
            f"line {number}",
            f"a number the parser refuses ({error}); write ids and numbers as short strings",
        )
        return None
    if not isinstance(record, dict):
        _problem(report, strict, path, f"line {number}", f"expected a JSON object, found {type(record).__name__}")
        return None
    return record


def _record_id(path: Path, number: int, record: dict, report: LoadReport, strict: bool) -> str | None:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        found = 'no "_id"' if value is None else f'"_id" = {value!r}'
        _problem(report, strict, path, f"line {number}", f'{found}; every record needs a non-empty string "_id"')
        return None
    if problem := _id_problem(str(value)):
        _problem(report, strict, path, f"line {number}", f'"_id": {problem}')
        return None
    return str(value)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins valid pairs: any left is unpaired
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:/-]+")  # most ids (PMIDs, MED-10): none of the problems below


def _id_problem(value: str) -> str | None:
    """What is wrong with an id (whitespace, or half a UTF-16 pair), or None.

    Ids are stored one per line in the statistics and written into space-separated
    TREC runs, so a space, tab or line break in one would corrupt both; an unpaired
    surrogate (a JSON escape such as \\ud800) is not text any file can store.
    """
    if len(value) <= MAX_ID_BYTES and _PLAIN_ID.fullmatch(value):  # the common case, without a loop a character
        return None
    if len(value.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        return f"{value[:40]!r}... is longer than {MAX_ID_BYTES} bytes; use shorter ids"
    if any(character.isspace() for character in value):
        return f"{value!r} contains whitespace; use ids without spaces, tabs or line breaks"
    if any(unicodedata.category(character) in ("Cc", "Cf") for character in value):
        return f"{value!r} contains a control or format character (such as NUL); use printable ids"
    if _LONE_SURROGATE.search(value):
        return f"{value!r} holds an unpaired UTF-16 surrogate escape (such as \\ud800); write it as valid Unicode"
    return None


def _string_field(path: Path, number: int, record: dict, name: str, report: LoadReport, strict: bool) -> str | None:
    """A text field; absent or null reads as empty, any other non-string is a problem."""
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        _problem(
            report,
            strict,
            path,
            f"line {number}",
            f'"{name}" is a {type(value).__name__} ({str(value)[:40]!r}), expected a string',
        )
        return None
    # JSON can spell half a UTF-16 pair (\ud800) that no file can store; the index refuses it,
    # so it becomes U+FFFD, as a decoder replaces bytes that are not text. Encoding finds one in C,
    # a tenth of the regular expression's time on text that has none.
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", value)


def _report_to_fill(report: LoadReport | None) -> tuple[LoadReport, bool]:
    """The caller's report, or a new one that the reader logs itself when it is done (the bool)."""
    return (LoadReport(), True) if report is None else (report, False)


def _finish(report: LoadReport, own_report: bool, what: str) -> None:
    if own_report and (report.skipped or report.deleted):
        logger.warning("%s: %s", what, report.summary())


def read_beir_corpus(path: Path, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
    """Stream documents from a BEIR ``corpus.jsonl[.gz]`` (``text`` is the abstract)."""
    path = _require_file(path, 'a BEIR corpus file corpus.jsonl[.gz] with one {"_id", "title", "text"} object per line')
    return _beir_corpus(path, strict, report)


def _first_time(seen: KeySet, doc_id: str, report: LoadReport, strict: bool, path: Path, location: str) -> bool:
    """Whether ``doc_id`` is new to the load; a repeat is reported as a problem at ``path``, ``location``."""
    if seen.add(string_key(doc_id)):
        return True
    _problem(
        report,
        strict,
        path,
        location,
        f"document id {doc_id!r} was read before in this load; ids must be "
        "unique, so the first one is kept: remove or rename this one",
    )
    return False


def _beir_corpus(path: Path, strict: bool, report: LoadReport | None, seen: KeySet | None = None) -> Iterator[Document]:
    report, own_report = _report_to_fill(report)
    seen = KeySet() if seen is None else seen
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
        if abstract is None or not _first_time(seen, doc_id, report, strict, path, f"line {number}"):
            continue
        report.read += 1
        metadata = record.get("metadata")
        yield Document(doc_id, title, abstract, metadata=metadata if isinstance(metadata, dict) and metadata else None)
    _finish(report, own_report, str(path))


def read_queries(path: Path, strict: bool = False, report: LoadReport | None = None) -> dict[str, str]:
    """Query id -> text from a BEIR ``queries.jsonl[.gz]`` or an ``ID<TAB>TEXT`` file.

    A repeated query id is a problem; the first text is kept.
    """
    path = _require_file(
        path, 'a BEIR queries.jsonl with one {"_id", "text"} object per line, or a TSV file of ID<TAB>TEXT lines'
    )
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
                _problem(
                    report,
                    strict,
                    path,
                    f"line {number}",
                    "expected ID<TAB>TEXT (a tab-separated query id and query text)",
                )
                continue
            query_id, text = query_id.strip(), text.strip()
            if problem := _id_problem(query_id):
                _problem(report, strict, path, f"line {number}", f"query id {problem}")
                continue
        if query_id is None or text is None:
            continue
        if query_id in queries:
            _problem(
                report,
                strict,
                path,
                f"line {number}",
                f"query id {query_id!r} appears again; each query id must be unique",
            )
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
    path = _require_file(
        path, "a qrels file: BEIR TSV lines 'query-id<TAB>corpus-id<TAB>score' or TREC lines 'QID 0 DOCID GRADE'"
    )
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
            _problem(
                report,
                strict,
                path,
                f"line {number}",
                f"{len(parts)} columns; expected 3 (query-id corpus-id score) or 4 (QID ITERATION DOCID GRADE)",
            )
            continue
        grade = _integer(grade_text)
        if grade is None:
            _problem(report, strict, path, f"line {number}", f"grade {grade_text!r} is not an integer")
            continue
        if abs(grade) > MAX_GRADE:
            _problem(
                report,
                strict,
                path,
                f"line {number}",
                f"grade {grade_text[:20]!r} is outside -{MAX_GRADE}..{MAX_GRADE}; relevance grades are small "
                "integers (NFCorpus: 0-2)",
            )
            continue
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            if judged[doc_id] != grade:
                _problem(
                    report,
                    strict,
                    path,
                    f"line {number}",
                    f"({qid}, {doc_id}) judged again with grade {grade} after {judged[doc_id]}; "
                    "keep one judgment per pair",
                )
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


_YEAR = re.compile(r"\b(1[5-9][0-9]{2}|20[0-9]{2})\b")


def _year_of(pub_date: ElementTree.Element | None) -> int | None:
    """The publication year of a ``PubDate``: its ``Year``, else the first year in its ``MedlineDate`` (e.g. "1998
    Dec-1999 Jan")."""
    if pub_date is None:
        return None
    found = _YEAR.search(_text_of(pub_date.find("Year")) or _text_of(pub_date.find("MedlineDate")))
    return int(found.group(1)) if found else None


def _author_name(author: ElementTree.Element) -> str:
    """An author as PubMed displays one: "LastName Initials", or a group's collective name."""
    last = _text_of(author.find("LastName"))
    if not last:
        return _text_of(author.find("CollectiveName"))
    return " ".join(part for part in (last, _text_of(author.find("Initials"))) if part)


def _doi_of(record: ElementTree.Element, article: ElementTree.Element) -> str | None:
    """The article's DOI: its ``ELocationID`` of type doi, else ``PubmedData``'s ``ArticleId`` of type doi."""
    for element in (*article.iterfind("ELocationID"), *record.iterfind("PubmedData/ArticleIdList/ArticleId")):
        if (element.get("EIdType") or element.get("IdType")) == "doi" and (doi := _text_of(element)):
            return doi
    return None


def _article_metadata(record: ElementTree.Element, article: ElementTree.Element) -> dict:
    """Journal, year, authors, MeSH descriptors, publication types and DOI of a ``PubmedArticle``."""
    authors = (_author_name(author) for author in article.iterfind("AuthorList/Author"))
    return {
        "journal": _text_of(article.find("Journal/Title")) or _text_of(article.find("Journal/ISOAbbreviation")),
        "year": _year_of(article.find("Journal/JournalIssue/PubDate")),
        "authors": tuple(name for name in authors if name),
        "mesh": tuple(
            name
            for heading in record.iterfind("MedlineCitation/MeshHeadingList/MeshHeading")
            if (name := _text_of(heading.find("DescriptorName")))
        ),
        "publication_types": tuple(
            name for element in article.iterfind("PublicationTypeList/PublicationType") if (name := _text_of(element))
        ),
        "doi": _doi_of(record, article),
    }


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
        return Document(pmid, title, _abstract_of(article.find("Abstract")), **_article_metadata(record, article)), ""
    book = record.find("BookDocument")
    pmid = _text_of(book.find("PMID")) if book is not None else ""
    if book is None or not pmid:
        return None, "PubmedBookArticle without BookDocument/PMID"
    title = _text_of(book.find("ArticleTitle")) or _text_of(book.find("Book/BookTitle"))
    return Document(pmid, title, _abstract_of(book.find("Abstract"))), ""


def read_pubmed_xml(path: Path, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
    """Stream documents from one PubMed/MEDLINE XML file (``.xml`` or ``.xml.gz``)."""
    path = _require_file(path, "a PubMed/MEDLINE XML file (<PubmedArticleSet>, .xml or .xml.gz)")
    return _pubmed_xml(path, strict, report)


@dataclass
class UpdatePlan:
    """What the update files of a load end with, per PMID: sorted keys, the file and record of each PMID's
    last action there (a record, or the DeleteCitation block that removes it), and whether an earlier
    version was met during the load."""

    keys: np.ndarray  # uint64 [n], sorted PMID keys
    file: np.ndarray  # int32 [n]: index of the update file of the last action
    record: np.ndarray  # int64 [n]: its record number there
    delete: np.ndarray  # bool [n]: the last action is a DeleteCitation
    earlier: np.ndarray  # bool [n]: a version of it was read before the last action (set during the load)

    def find(self, pmid: str) -> int | None:
        """The plan's row of ``pmid``, None when no update file names it."""
        key = np.uint64(string_key(pmid))
        row = int(np.searchsorted(self.keys, key))
        return row if row < len(self.keys) and self.keys[row] == key else None


def scan_updates(files: list[Path]) -> UpdatePlan:
    """The last action of every PMID in ``files`` (update files, in load order): one pass, PMIDs only."""
    keys, file_index, records, deletes = [], [], [], []
    for index, path in enumerate(files):
        for record_number, pmids, is_delete in _pubmed_pmids(path):
            file_keys = np.fromiter((string_key(p) for p in pmids), dtype=np.uint64, count=len(pmids))
            keys.append(file_keys)
            file_index.append(np.full(len(pmids), index, dtype=np.int32))
            records.append(np.full(len(pmids), record_number, dtype=np.int64))
            deletes.append(np.full(len(pmids), is_delete, dtype=bool))
    if not keys:
        empty = np.zeros(0, dtype=np.uint64)
        return UpdatePlan(empty, np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, bool))
    all_keys = np.concatenate(keys)
    # The last action wins: unique over the reversed sequence keeps each key's last occurrence.
    unique, last_from_end = np.unique(all_keys[::-1], return_index=True)
    last = len(all_keys) - 1 - last_from_end
    return UpdatePlan(
        unique,
        np.concatenate(file_index)[last],
        np.concatenate(records)[last],
        np.concatenate(deletes)[last],
        np.zeros(len(unique), dtype=bool),
    )


def _pubmed_records(path: Path, strict: bool, report: LoadReport) -> Iterator[tuple[int, ElementTree.Element]]:
    """(record number, element) of each PubmedArticle, PubmedBookArticle and DeleteCitation of a file.

    The element is cleared once the consumer moves on; a syntax error or a damaged gzip
    stream raises ``DamagedFileError``.
    """
    record_number = 0
    root: ElementTree.Element | None = None
    try:
        with _open_binary(path) as stream:
            for event, element in ElementTree.iterparse(stream, events=("start", "end")):
                if root is None:
                    root = element
                    if root.tag != PUBMED_ROOT:
                        _problem(
                            report,
                            strict,
                            path,
                            "line 1",
                            f"root element is <{root.tag}>, expected <{PUBMED_ROOT}>; "
                            "this is not a PubMed/MEDLINE XML file, so it was not read",
                        )
                        return
                    continue
                if event != "end" or element.tag not in _PUBMED_RECORDS:
                    continue
                record_number += 1
                yield record_number, element
                root.clear()  # drop the finished record (and any before it)
    except ElementTree.ParseError as error:
        line, column = error.position
        reason = str(error).rsplit(": line", 1)[0]  # the position is in the location already
        raise DamagedFileError(
            path,
            f"line {line}, column {column}",
            f"XML syntax error after record {record_number} ({reason}); download the file again",
        ) from None
    except _GZIP_ERRORS as error:
        raise DamagedFileError(
            path,
            f"after record {record_number}",
            f"the gzip stream is truncated or corrupt ({error}); download the file again",
        ) from None
    finally:
        if root is not None:
            root.clear()


def _pubmed_pmids(path: Path) -> Iterator[tuple[int, list[str], bool]]:
    """(record number, PMIDs, is a DeleteCitation) of each record of a file; records without a PMID are left
    to the load to report."""
    for record_number, element in _pubmed_records(path, False, LoadReport()):
        if element.tag == "DeleteCitation":
            yield record_number, [_text_of(p) for p in element.findall("PMID")], True
        else:
            document, _ = _pubmed_document(element)
            if document is not None:
                yield record_number, [document.doc_id], False


def _pubmed_xml(
    path: Path,
    strict: bool,
    report: LoadReport | None,
    seen: KeySet | None = None,
    updates: UpdatePlan | None = None,
    update_file: int | None = None,
) -> Iterator[Document]:
    """The documents of one PubMed file; with ``updates``, the baseline (``update_file`` None) or update file
    ``update_file`` of a baseline + updates load."""
    report, own_report = _report_to_fill(report)
    seen = KeySet() if seen is None else seen
    records = _pubmed_records(path, strict, report)
    for record_number, element in records:
        location = f"record {record_number}"
        if element.tag == "DeleteCitation":
            pmids = [_text_of(p) for p in element.findall("PMID")]
            report.deleted += len(pmids)
            if updates is not None and update_file is not None:
                for pmid in pmids:
                    row = updates.find(pmid)
                    if (
                        row is not None
                        and updates.delete[row]
                        and updates.file[row] == update_file
                        and updates.record[row] == record_number
                        and updates.earlier[row]
                    ):
                        report.removed += 1
            continue
        document, missing = _pubmed_document(element)
        if document is None:
            _problem(report, strict, path, location, f"{missing}; a PubMed record needs its PMID")
            continue
        if problem := _id_problem(document.doc_id):
            _problem(report, strict, path, location, f"PMID {problem}")
            continue
        row = updates.find(document.doc_id) if updates is not None else None
        if updates is not None and row is not None:
            final = (
                not updates.delete[row]
                and update_file is not None
                and updates.file[row] == update_file
                and updates.record[row] == record_number
            )
            if not final:  # a later update revises or deletes it
                updates.earlier[row] = True
                continue
        if not _first_time(seen, document.doc_id, report, strict, path, location):
            continue
        if updates is not None:
            if row is not None and updates.earlier[row]:
                report.replaced += 1
            else:
                report.added += 1
        report.read += 1
        yield document
    _finish(report, own_report, str(path))


def pubmed_files(directory: Path) -> list[Path]:
    """The PubMed baseline/update files of a directory (``pubmed*.xml[.gz]``), sorted by name.

    Where both ``X.xml`` and ``X.xml.gz`` are there, only the ``.gz`` is read.
    """
    gz = sorted(directory.glob("pubmed*.xml.gz"))
    stems = {p.name[:-3] for p in gz}
    plain = [p for p in directory.glob("pubmed*.xml") if p.name not in stems]
    return sorted(gz + plain, key=lambda p: p.name)


def _chain(
    readers: Iterable[Iterator[Document]], report: LoadReport, own_report: bool, what: str
) -> Iterator[Document]:
    for reader in readers:
        yield from reader
    _finish(report, own_report, what)


def _baseline_and_updates(directory: Path, strict: bool, report: LoadReport | None) -> Iterator[Document]:
    """A load of ``baseline/`` then ``updatefiles/`` (see the module docstring)."""
    baseline = pubmed_files(directory / BASELINE_DIR) if (directory / BASELINE_DIR).is_dir() else []
    updates = pubmed_files(directory / UPDATES_DIR) if (directory / UPDATES_DIR).is_dir() else []
    if not baseline and not updates:
        raise CorpusNotFoundError(
            f"{directory}: neither {BASELINE_DIR}/ nor {UPDATES_DIR}/ holds pubmed*.xml[.gz] "
            "files; put the baseline files in the first and the update files in the second"
        )
    report, own_report = _report_to_fill(report)
    report.updates = True
    return _chain(_update_readers(baseline, updates, strict, report), report, own_report, str(directory))


def _update_readers(
    baseline: list[Path], updates: list[Path], strict: bool, report: LoadReport
) -> Iterator[Iterator[Document]]:
    plan = scan_updates(updates)  # when the load starts, not when read_corpus is called
    seen = KeySet()
    for path in baseline:
        yield _pubmed_xml(path, strict, report, seen, plan)
    for index, path in enumerate(updates):
        yield _pubmed_xml(path, strict, report, seen, plan, index)


def beir_corpus_file(directory: Path) -> Path | None:
    """The one ``corpus.jsonl[.gz]`` in a BEIR ``directory``, None if it has none; two are an error."""
    found = [directory / name for name in BEIR_CORPUS_NAMES if (directory / name).is_file()]
    if len(found) > 1:  # a stale copy beside a fresh one: loading either could be the wrong corpus
        raise CorpusNotFoundError(
            f"{directory} holds both {' and '.join(f.name for f in found)}; pass the one to "
            f"load with --data {found[0]} (or {found[1].name}), or remove the other"
        )
    return found[0] if found else None


def read_corpus(path: Path, strict: bool = False, report: LoadReport | None = None) -> Iterator[Document]:
    """Stream the documents at ``path``, whatever the format.

    ``path`` may be a BEIR directory (``corpus.jsonl`` or ``corpus.jsonl.gz``
    inside), a ``.jsonl[.gz]`` file, a PubMed ``.xml[.gz]`` file, a directory
    of PubMed baseline files (``pubmed*.xml[.gz]``, read in name order), or one
    with ``baseline/`` and ``updatefiles/`` folders (updates applied). The path
    is checked now; the documents come as the iterator is consumed.
    """
    path = Path(path)
    expected = (
        "a BEIR directory (corpus.jsonl[.gz] inside), a corpus .jsonl[.gz] file, a PubMed "
        ".xml[.gz] file, a directory of PubMed baseline files pubmed*.xml[.gz], or one with baseline/ "
        "and updatefiles/ folders of them"
    )
    if not path.exists():
        raise CorpusNotFoundError(f"{path} does not exist; expected {expected}")
    if path.is_dir():
        beir = beir_corpus_file(path)
        if beir is not None:
            return _beir_corpus(beir, strict, report)
        if (path / BASELINE_DIR).is_dir() or (path / UPDATES_DIR).is_dir():
            return _baseline_and_updates(path, strict, report)
        files = pubmed_files(path)
        if not files:
            raise CorpusNotFoundError(
                f"{path} holds neither corpus.jsonl[.gz] nor pubmed*.xml[.gz] files; expected {expected}"
            )
        report, own_report = _report_to_fill(report)
        seen = KeySet()
        # Each file's reader shares the report; the summary is logged once, at the end.
        return _chain((_pubmed_xml(f, strict, report, seen) for f in files), report, own_report, str(path))
    name = path.name.lower()
    if name.endswith(_JSON_LINES_SUFFIXES):
        return _beir_corpus(path, strict, report)
    if name.endswith((".xml", ".xml.gz")):
        return _pubmed_xml(path, strict, report)
    raise CorpusNotFoundError(f"{path}: unknown corpus format (by its name); expected {expected}")
