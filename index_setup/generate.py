"""A PubMed-like corpus generator for scale tests: ``esrr generate pubmed``.

Documents are recombined from real biomedical text under ``../shared/data``
(NFCorpus, OHSUMED and BC5CDR titles and abstract sentences): each document takes
a real title and as many real abstract sentences as a real abstract of the pool
has (so lengths follow the real distribution, empty abstracts included).
Recombined text alone stops adding words once the pool's vocabulary is used up,
while real literature keeps adding names (genes, variants, compounds) as it grows.
So rare entity-like words (``rs1000123``, ``Kbx-4417``) are minted: after T tokens
the corpus holds about K·T^β distinct terms (Heaps' law), with K and β fitted on
the pool itself by least squares on log V against log T (``heaps_fit``; printed
and written to ``generation.json``). Minted words are reused Zipf-like, so most
are rare but not all hapaxes. Journal, year, authors, MeSH headings and
publication types come from small fixed lists: they are shape, not content.

Output, like NLM's FTP layout (``pubmed/baseline``, ``pubmed/updatefiles``):

- ``baseline/pubmed26nNNNN.xml.gz``: ``PubmedArticleSet`` files of ``per_file``
  articles (30,000 in the real baseline),
- ``updatefiles/pubmed26nNNNN.xml.gz`` (numbering continues): new articles,
  revised versions of earlier PMIDs and ``DeleteCitation`` blocks,
- ``beir/corpus.jsonl.gz``: the corpus a load of both should end with (revisions
  applied, deletions removed), in the order that load yields it,
- ``generation.json``: the parameters, the Heaps fit and the counts.

Deterministic: the same pool, seed and parameters give byte-identical files
(gzip headers carry no time or name).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

import click
import numpy as np
from tqdm import tqdm

from es_rerank.text import tokenize

FILE_PREFIX = "pubmed26n"
SOURCE_NAMES = ("nfcorpus", "ohsumed", "bc5cdr")  # sources with a separate title and abstract
_SENTENCE_SPLIT = ". "

JOURNALS = (
    "The New England journal of medicine",
    "Lancet (London, England)",
    "JAMA",
    "BMJ (Clinical research ed.)",
    "The American journal of clinical nutrition",
    "Journal of the American College of Cardiology",
    "Cancer research",
    "Nature",
    "Science (New York, N.Y.)",
    "PloS one",
    "Scientific reports",
    "Nutrients",
    "The Journal of nutrition",
    "Circulation",
    "Diabetes care",
    "Journal of clinical oncology",
    "Annals of internal medicine",
    "Pediatrics",
    "Neurology",
    "Gastroenterology",
    "Hepatology",
    "The Journal of biological chemistry",
    "Proceedings of the National Academy of Sciences",
    "European journal of epidemiology",
    "International journal of cancer",
    "Obesity (Silver Spring, Md.)",
)
SURNAMES = (
    "Smith",
    "Wang",
    "Li",
    "Zhang",
    "Garcia",
    "Müller",
    "Kim",
    "Nguyen",
    "Rossi",
    "Tanaka",
    "Johnson",
    "Brown",
    "Silva",
    "Kowalski",
    "Novak",
    "Dubois",
    "Jensen",
    "Olsen",
    "Patel",
    "Singh",
    "Cohen",
    "Ivanov",
    "Martin",
    "Lee",
    "Chen",
    "Sato",
    "Andersson",
    "Nielsen",
    "Fischer",
    "Lopez",
)
FORENAMES = ("Anna", "John", "Wei", "Maria", "Hiroshi", "Lars", "Priya", "David", "Elena", "Jun", "Sara", "Omar")
MESH = (
    "Humans",
    "Male",
    "Female",
    "Adult",
    "Middle Aged",
    "Aged",
    "Animals",
    "Mice",
    "Rats",
    "Child",
    "Adolescent",
    "Risk Factors",
    "Cohort Studies",
    "Prospective Studies",
    "Retrospective Studies",
    "Diet",
    "Neoplasms",
    "Breast Neoplasms",
    "Cardiovascular Diseases",
    "Diabetes Mellitus, Type 2",
    "Obesity",
    "Vitamin D",
    "Dietary Supplements",
    "Inflammation",
    "Oxidative Stress",
    "Brain",
    "Liver",
    "Treatment Outcome",
    "Prognosis",
    "Cell Line, Tumor",
    "Gene Expression",
    "Apoptosis",
)
PUBLICATION_TYPES = (
    "Journal Article",
    "Review",
    "Randomized Controlled Trial",
    "Comparative Study",
    "Case Reports",
    "Meta-Analysis",
    "Research Support, Non-U.S. Gov't",
)
SECTION_LABELS = ("BACKGROUND", "METHODS", "RESULTS", "CONCLUSIONS")
_SYLLABLES = ("Kb", "Tr", "Zn", "Ad", "Fox", "Sl", "Mt", "Hn", "Cd", "Pl", "Gp", "Rx")


class GenerationError(ValueError):
    """The text pool is missing or the parameters cannot make a corpus; the message says what to change."""


@dataclass(frozen=True)
class TextPool:
    """Real titles and abstract sentences to recombine, with each sentence's token count."""

    titles: tuple[str, ...]
    sentences: tuple[str, ...]
    sentence_tokens: np.ndarray  # int32 [len(sentences)]
    title_tokens: np.ndarray  # int32 [len(titles)]
    sentence_counts: np.ndarray  # int32: sentences per real abstract (0 for none), the length distribution
    heaps_k: float
    heaps_beta: float
    vocabulary: int  # distinct tokens of the pool


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def clean_text(text: str) -> str:
    """``text`` with characters XML cannot carry dropped and whitespace runs collapsed (as the PubMed reader does)."""
    return " ".join(_CONTROL.sub("", text).split())


def split_sentences(abstract: str) -> list[str]:
    """An abstract's sentences (split at '. '), each ending with its full stop."""
    parts = [p.strip() for p in abstract.split(_SENTENCE_SPLIT) if p.strip()]
    return [p if p.endswith((".", "?", "!")) else p + "." for p in parts]


def heaps_fit(token_lists: Sequence[Sequence[str]], points: int = 24) -> tuple[float, float, int]:
    """(K, β, vocabulary) of V = K·T^β fitted by least squares on log-log (T tokens, V distinct) in reading order."""
    total = sum(len(t) for t in token_lists)
    if total < 100:
        raise GenerationError(f"the text pool holds {total} tokens; Heaps' law needs at least 100 to fit")
    marks = set(np.unique(np.geomspace(100, total, points).astype(np.int64)).tolist())
    seen: set[str] = set()
    count, xs, ys = 0, [], []
    for tokens in token_lists:
        for token in tokens:
            seen.add(token)
            count += 1
            if count in marks:
                xs.append(math.log(count))
                ys.append(math.log(len(seen)))
    beta, log_k = np.polyfit(xs, ys, 1)
    return float(math.exp(log_k)), float(beta), len(seen)


def load_pool(data_root: Path) -> TextPool:
    """The recombination pool from ``data_root`` (``../shared/data``), with its Heaps fit."""
    from index_setup.text_sources import SOURCES, TextSourceError, iter_documents

    try:
        docs = list(iter_documents(Path(data_root), [s for s in SOURCES if s.name in SOURCE_NAMES]))
    except TextSourceError as error:
        raise GenerationError(f"{error}; point --data at the shared data folder (../shared/data)") from None
    titles, sentences, counts, token_lists = [], [], [], []
    for doc in docs:
        title, abstract = clean_text(doc.parts[0]), clean_text(doc.parts[1])
        if not title:
            continue
        titles.append(title)
        parts = split_sentences(abstract)
        sentences.extend(parts)
        counts.append(len(parts))
        token_lists.append(tokenize(title))
        token_lists.extend(tokenize(p) for p in parts)
    if not titles or not sentences:
        raise GenerationError(f"no titled abstracts under {data_root}; point --data at ../shared/data")
    k, beta, vocabulary = heaps_fit(token_lists)
    return TextPool(
        tuple(titles),
        tuple(sentences),
        np.array([len(tokenize(s)) for s in sentences], dtype=np.int32),
        np.array([len(tokenize(t)) for t in titles], dtype=np.int32),
        np.array(counts, dtype=np.int32),
        k,
        beta,
        vocabulary,
    )


def minted_word(number: int) -> str:
    """The ``number``-th entity-like word: distinct for every number, one token for ``tokenize``."""
    kind = number % 4
    if kind == 0:
        return f"rs{1_000_000 + number}"
    syllable = _SYLLABLES[(number // 4) % len(_SYLLABLES)]
    if kind == 1:
        return f"{syllable}-{number}"
    if kind == 2:
        return f"{syllable}{number}x"
    return f"CID{number}"


@dataclass
class Article:
    """One generated citation."""

    pmid: int
    title: str
    sections: list[tuple[str, str]]  # (label or "", text)
    journal: str
    year: int
    authors: list[tuple[str, str]]
    mesh: list[str]
    publication_types: list[str]

    @property
    def doi(self) -> str:
        """A DOI under 10.5555, the prefix DOI's handbook sets aside for examples (derived from the PMID)."""
        return f"10.5555/esrr.{self.pmid}"

    @property
    def abstract(self) -> str:
        """The abstract as the PubMed reader writes it (``LABEL: text`` sections joined by a space)."""
        return " ".join(f"{label}: {text}" if label else text for label, text in self.sections)

    def xml(self) -> str:
        """The ``PubmedArticle`` element."""
        authors = "".join(
            f'<Author ValidYN="Y"><LastName>{escape(last)}</LastName><ForeName>{escape(first)}'
            f"</ForeName><Initials>{first[0]}</Initials></Author>"
            for last, first in self.authors
        )
        sections = "".join(
            f'<AbstractText Label="{label}">{escape(text)}</AbstractText>'
            if label
            else f"<AbstractText>{escape(text)}</AbstractText>"
            for label, text in self.sections
        )
        abstract = f"<Abstract>{sections}</Abstract>" if self.sections else ""
        mesh = "".join(
            f'<MeshHeading><DescriptorName MajorTopicYN="N">{escape(m)}</DescriptorName></MeshHeading>'
            for m in self.mesh
        )
        types = "".join(f"<PublicationType>{escape(t)}</PublicationType>" for t in self.publication_types)
        return (
            f'<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM">'
            f'<PMID Version="1">{self.pmid}</PMID><Article PubModel="Print"><Journal><JournalIssue '
            f'CitedMedium="Print"><PubDate><Year>{self.year}</Year></PubDate></JournalIssue>'
            f"<Title>{escape(self.journal)}</Title></Journal><ArticleTitle>{escape(self.title)}</ArticleTitle>"
            f'<ELocationID EIdType="doi" ValidYN="Y">{self.doi}</ELocationID>{abstract}'
            f'<AuthorList CompleteYN="Y">{authors}</AuthorList><Language>eng</Language>'
            f"<PublicationTypeList>{types}</PublicationTypeList></Article>"
            f"<MeshHeadingList>{mesh}</MeshHeadingList></MedlineCitation></PubmedArticle>\n"
        )


@dataclass
class ArticleMaker:
    """Draws articles one after another, minting rare words so the vocabulary follows Heaps' law."""

    pool: TextPool
    seed: int
    tokens: int = 0  # tokens generated so far
    minted: int = 0  # entity-like words minted so far

    def make(self, pmid: int, version: int = 1) -> Article:
        """The article of ``pmid`` (``version`` > 1: a revision with new text)."""
        rng = np.random.default_rng([self.seed, pmid, version])
        pool = self.pool
        title_row = int(rng.integers(len(pool.titles)))
        n_sentences = int(pool.sentence_counts[rng.integers(len(pool.sentence_counts))])
        rows = rng.integers(len(pool.sentences), size=n_sentences)
        words = [pool.sentences[r].split(" ") for r in rows]
        self.tokens += int(pool.title_tokens[title_row]) + int(pool.sentence_tokens[rows].sum())
        # Heaps: K·T^β distinct terms after T tokens; the pool's own words cover the first `vocabulary`.
        new = max(0, int(pool.heaps_k * self.tokens**pool.heaps_beta) - pool.vocabulary - self.minted)
        entities = [minted_word(self.minted + i) for i in range(new)]
        self.minted += new
        if self.minted:  # reuse: rank r drawn with density ~ 1/r (Zipf-like), so a few are common
            reuse = int(rng.poisson(1.5))
            ranks = np.exp(rng.uniform(0, math.log(self.minted), size=reuse)).astype(np.int64) - 1
            entities += [minted_word(int(r)) for r in ranks]
        title = pool.titles[title_row]
        if words:
            for entity in entities:  # replace a word: the abstract keeps its length
                sentence = words[int(rng.integers(len(words)))]
                sentence[int(rng.integers(len(sentence)))] = entity
        elif entities:
            title = f"{title} ({', '.join(entities)})"
        texts = [" ".join(w) for w in words]
        if len(texts) >= 4 and rng.random() < 0.3:  # a structured abstract
            cuts = np.array_split(np.arange(len(texts)), 4)
            sections = [(label, " ".join(texts[i] for i in cut)) for label, cut in zip(SECTION_LABELS, cuts)]
        else:
            sections = [("", " ".join(texts))] if texts else []
        authors = [
            (SURNAMES[int(a)], FORENAMES[int(b)])
            for a, b in rng.integers((len(SURNAMES), len(FORENAMES)), size=(int(rng.integers(1, 9)), 2))
        ]
        mesh = sorted({MESH[int(m)] for m in rng.integers(len(MESH), size=int(rng.integers(3, 12)))})
        types = ["Journal Article"] + (
            [PUBLICATION_TYPES[int(rng.integers(1, len(PUBLICATION_TYPES)))]] if rng.random() < 0.4 else []
        )
        return Article(
            pmid,
            title,
            sections,
            JOURNALS[int(rng.integers(len(JOURNALS)))],
            int(rng.integers(1975, 2026)),
            authors,
            mesh,
            types,
        )


@dataclass
class UpdatePlan:
    """What each update file does: new PMIDs, revised PMIDs, deleted PMIDs (disjoint within a file)."""

    new: list[np.ndarray] = field(default_factory=list)
    revised: list[np.ndarray] = field(default_factory=list)
    deleted: list[np.ndarray] = field(default_factory=list)


def plan_updates(
    n_docs: int,
    update_files: int,
    seed: int,
    new_fraction: float,
    revise_fraction: float,
    delete_fraction: float,
    first_pmid: int,
) -> UpdatePlan:
    """Choose the PMIDs each update file adds, revises and deletes (earlier updates' PMIDs included)."""
    rng = np.random.default_rng([seed, 0xC0FFEE])
    plan = UpdatePlan()
    existing = np.arange(first_pmid, first_pmid + n_docs, dtype=np.int64)
    next_pmid = first_pmid + n_docs
    alive = np.ones(n_docs, dtype=bool)
    for _ in range(update_files):
        n_new = int(round(n_docs * new_fraction))
        candidates = np.flatnonzero(alive)
        n_rev = min(int(round(n_docs * revise_fraction)), len(candidates))
        n_del = min(int(round(n_docs * delete_fraction)), len(candidates) - n_rev)
        chosen = rng.choice(candidates, size=n_rev + n_del, replace=False)
        plan.revised.append(np.sort(existing[chosen[:n_rev]]))
        plan.deleted.append(np.sort(existing[chosen[n_rev:]]))
        alive[chosen[n_rev:]] = False
        new = np.arange(next_pmid, next_pmid + n_new, dtype=np.int64)
        plan.new.append(new)
        next_pmid += n_new
        existing = np.concatenate([existing, new])
        alive = np.concatenate([alive, np.ones(n_new, dtype=bool)])
    return plan


@dataclass
class GenerationReport:
    """What was written."""

    docs: int
    seed: int
    per_file: int
    baseline_files: int
    update_files: int
    new_in_updates: int
    revised: int
    deleted: int
    final_docs: int
    tokens: int
    minted_words: int
    heaps_k: float
    heaps_beta: float
    pool_vocabulary: int
    pool_titles: int
    pool_sentences: int


class _GzipWriter(gzip.GzipFile):
    """A gzip file written to ``path`` that closes the file under it too (GzipFile leaves a given one open)."""

    def __init__(self, path: Path) -> None:
        self._raw = path.open("wb")
        # mtime=0 and no file name in the header: the same corpus gives the same bytes.
        super().__init__(filename="", mode="wb", fileobj=self._raw, compresslevel=5, mtime=0)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _gzip_writer(path: Path) -> gzip.GzipFile:
    return _GzipWriter(path)


class _XmlFile:
    """A gzipped ``PubmedArticleSet`` file being written."""

    def __init__(self, path: Path) -> None:
        self.gz = _gzip_writer(path)
        self.gz.write(b'<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE PubmedArticleSet>\n<PubmedArticleSet>\n')

    def write(self, text: str) -> None:
        self.gz.write(text.encode("utf-8"))

    def close(self) -> None:
        self.gz.write(b"</PubmedArticleSet>\n")
        self.gz.close()


def generate_pubmed(
    out: Path,
    docs: int,
    pool: TextPool,
    seed: int = 0,
    per_file: int = 30_000,
    update_files: int = 2,
    new_fraction: float = 0.01,
    revise_fraction: float = 0.005,
    delete_fraction: float = 0.001,
    first_pmid: int = 1,
    beir: bool = True,
    progress: bool = True,
) -> GenerationReport:
    """Write ``docs`` baseline articles, ``update_files`` update files and the final BEIR corpus under ``out``."""
    if docs < 1 or per_file < 1 or update_files < 0:
        raise GenerationError(
            f"docs={docs}, per_file={per_file}, update_files={update_files}: give at least one "
            "document and one article per file, and zero or more update files"
        )
    for name in ("baseline", "updatefiles", "beir"):
        if (out / name).exists() and any((out / name).iterdir()):
            raise GenerationError(f"{out / name} is not empty; generate into a new folder")
        (out / name).mkdir(parents=True, exist_ok=True)
    plan = plan_updates(docs, update_files, seed, new_fraction, revise_fraction, delete_fraction, first_pmid)
    touched = np.unique(np.concatenate([*plan.revised, *plan.deleted])) if update_files else np.zeros(0, np.int64)
    final_version = _final_versions(plan)  # pmid -> (update index, version) of the surviving update record
    maker = ArticleMaker(pool, seed)
    beir_out = _gzip_writer(out / "beir" / "corpus.jsonl.gz") if beir else None
    final_docs = 0

    def to_beir(article: Article) -> None:
        nonlocal final_docs
        final_docs += 1
        if beir_out is not None:
            line = json.dumps(
                {"_id": str(article.pmid), "title": article.title, "text": article.abstract}, ensure_ascii=False
            )
            beir_out.write((line + "\n").encode("utf-8"))

    number = 0
    bar = tqdm(
        total=docs + sum(len(n) + len(r) for n, r in zip(plan.new, plan.revised)),
        unit="doc",
        desc="generating",
        disable=not progress,
    )
    for start in range(0, docs, per_file):
        number += 1
        xml = _XmlFile(out / "baseline" / f"{FILE_PREFIX}{number:04d}.xml.gz")
        for pmid in range(first_pmid + start, first_pmid + min(start + per_file, docs)):
            article = maker.make(pmid)
            xml.write(article.xml())
            if not _contains(touched, pmid):
                to_beir(article)
            bar.update(1)
        xml.close()
    baseline_files = number
    versions: dict[int, int] = {}
    for update in range(update_files):
        number += 1
        xml = _XmlFile(out / "updatefiles" / f"{FILE_PREFIX}{number:04d}.xml.gz")
        records = sorted(
            [(int(p), "revised") for p in plan.revised[update]] + [(int(p), "new") for p in plan.new[update]]
        )
        for pmid, _kind in records:
            versions[pmid] = versions.get(pmid, 1) + 1
            article = maker.make(pmid, versions[pmid])
            xml.write(article.xml())
            if final_version.get(pmid) == update:
                to_beir(article)
            bar.update(1)
        if len(plan.deleted[update]):
            xml.write(
                "<DeleteCitation>"
                + "".join(f'<PMID Version="1">{p}</PMID>' for p in plan.deleted[update])
                + "</DeleteCitation>\n"
            )
        xml.close()
    bar.close()
    if beir_out is not None:
        beir_out.close()
    report = GenerationReport(
        docs,
        seed,
        per_file,
        baseline_files,
        update_files,
        sum(len(n) for n in plan.new),
        sum(len(r) for r in plan.revised),
        sum(len(d) for d in plan.deleted),
        final_docs,
        maker.tokens,
        maker.minted,
        pool.heaps_k,
        pool.heaps_beta,
        pool.vocabulary,
        len(pool.titles),
        len(pool.sentences),
    )
    (out / "generation.json").write_text(json.dumps(asdict(report), indent=2) + "\n", encoding="utf-8")
    return report


def _contains(sorted_values: np.ndarray, value: int) -> bool:
    position = int(np.searchsorted(sorted_values, value))
    return position < len(sorted_values) and int(sorted_values[position]) == value


def _final_versions(plan: UpdatePlan) -> dict[int, int]:
    """PMID -> index of the update file whose record of it survives (no later revision or deletion)."""
    final: dict[int, int] = {}
    for update, (new, revised, deleted) in enumerate(zip(plan.new, plan.revised, plan.deleted)):
        for pmid in (*new.tolist(), *revised.tolist()):
            final[pmid] = update
        for pmid in deleted.tolist():
            final.pop(pmid, None)
    return final


def iter_articles(pool: TextPool, docs: int, seed: int = 0) -> Iterator[Article]:
    """The baseline articles ``generate_pubmed`` writes, in order, without writing them."""
    maker = ArticleMaker(pool, seed)
    for pmid in range(1, docs + 1):
        yield maker.make(pmid)


@click.group()
def generate() -> None:
    """Generate synthetic corpora for scale tests."""


@generate.command()
@click.option("--docs", type=click.IntRange(min=1), required=True, help="Baseline articles to write.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Folder for baseline/, updatefiles/, beir/ and generation.json (new or empty).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same corpus.")
@click.option(
    "--per-file",
    type=click.IntRange(min=1),
    default=30_000,
    show_default=True,
    help="Articles per baseline file (the real baseline: about 30,000).",
)
@click.option(
    "--update-files",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Update files after the baseline (new, revised and deleted citations).",
)
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The real text to recombine (default: ../shared/data).",
)
@click.option(
    "--beir/--no-beir",
    default=True,
    show_default=True,
    help="Also write beir/corpus.jsonl.gz: the corpus after the updates.",
)
def pubmed(docs: int, out: Path, seed: int, per_file: int, update_files: int, data: Path | None, beir: bool) -> None:
    """Write a PubMed-like baseline + update files (gzipped XML) and its BEIR JSONL, deterministic from --seed."""
    from index_setup.nfcorpus import DEFAULT_NFCORPUS

    try:
        pool = load_pool(data or DEFAULT_NFCORPUS.parent)
        click.echo(
            f"pool: {len(pool.titles):,} titles, {len(pool.sentences):,} sentences, vocabulary "
            f"{pool.vocabulary:,}; Heaps fit V = {pool.heaps_k:.2f} * T^{pool.heaps_beta:.3f}"
        )
        report = generate_pubmed(out, docs, pool, seed=seed, per_file=per_file, update_files=update_files, beir=beir)
    except GenerationError as error:
        raise click.ClickException(str(error)) from None
    click.echo(
        f"wrote {report.baseline_files} baseline and {report.update_files} update files under {out}: "
        f"{report.docs:,} articles, {report.new_in_updates:,} new, {report.revised:,} revised and "
        f"{report.deleted:,} deleted in updates; {report.final_docs:,} documents after the updates; "
        f"{report.tokens:,} tokens, {report.minted_words:,} minted words"
    )
