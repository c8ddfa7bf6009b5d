"""Word2vec embeddings for the Delta model: training, the versioned artifact, loading.

Recipe (section 4.1 of Mohan et al., WWW 2018): gensim word2vec, skip-gram
(``sg=1``) with hierarchical softmax (``hs=1, negative=0``), window +-5, V = 300,
trained on every biomedical text in ``../shared/data`` (``index_setup.text_sources``:
five sources, deduplicated, split into sentences) in the embedding-path tokens of
``es_rerank.text`` (``embedding_tokens(tokenize(text))``, numbers in 7 classes).
Words below ``min_count`` become UNK, whose vector is U[-0.25, 0.25] (seeded).

Artifact: ``<embeddings_dir>/<version>/`` holds ``vectors.npy`` (float32
[rows, 300]; row 0 = PAD, all zeros; row 1 = UNK; then the words by descending
corpus frequency), ``vocab.txt`` (one word per line in row order, the first two
``<pad>`` and ``<unk>``) and ``meta.json`` (parameters, corpus counts, timings,
sources, losses). The directory is written under a hidden ``.partial`` name and
renamed when complete; only then is ``<embeddings_dir>/CURRENT`` (the version
name) replaced atomically, so a reader never sees a half-written table.

Why ``min_count = 2`` (``DEFAULT_MIN_COUNT``)
    The paper's 101 was set for ~27M PubMed abstracts (billions of tokens), where
    it still left a 207,716-word vocabulary. Our text is 20.56M embedding tokens
    after deduplication (18,930 documents, 800k sentences), 186,642 distinct
    tokens. Scaled by relative frequency, 101 in ~5e9 tokens is below one
    occurrence here, and 101 itself would keep only 10,086 words. Measured on the
    shared data (NFCorpus queries: 10,844 tokens, 3,145 distinct; NFCorpus
    documents: their first 50 tokens, what the model reads)::

        min_count  vocab    query tokens  query types  queries all known  NFCorpus doc tokens
          1        186,642    97.6 %        92.9 %       92.4 %             100.0 %
          2         91,968    96.7 %        90.6 %       89.6 %              99.6 %
          3         68,923    96.1 %        88.8 %       87.9 %              99.4 %
          5         50,984    95.1 %        86.2 %       84.7 %              98.9 %
         10         35,296    92.7 %        80.6 %       77.8 %              98.1 %
        101         10,086    79.9 %        55.6 %       45.8 %              92.2 %

    (Measured before the whitespace repair of ``write_line_corpus``; the trained
    artifact has 186,582 types and 91,949 words at min_count 2.)
    Coverage falls fast above a few occurrences, and an UNK query word makes the
    Delta stage match it to every UNK document word, so the threshold must be low.
    2 drops the hapax legomena: half the types (94,674) but only 0.46 % of the
    tokens, and mostly debris of the flattened PMC tables and reference markers
    (``sex.25``, ``testing.18``, ``nct01868672``). A vector seen in a single context
    is barely moved from its random start anyway. That halves the table
    (110 MB instead of 224 MB) at a cost of 2.3 points of query-type coverage.

Why ``epochs = 3`` (``DEFAULT_EPOCHS``)
    Measured on this 2-core machine, 2 worker threads (the default then), while other jobs shared the
    cores (the run got 0.9-1.05 CPUs on average): tokenizing and writing the
    corpus once takes 64-72 s; each epoch over the 20.56M tokens (15.5M effective
    after sub-sampling) takes 118-191 s (81k-131k effective words/s); the full
    run with 3 epochs took 8 min 15 s and 8 min 26 s of wall time. That is well
    under the 12 minutes allowed (the whole recipe, word2vec plus model training,
    must fit in 30); gensim's default of 5 epochs would need 12-15 minutes here.
    The loss per effective word still falls (3.17, 3.04, 2.78; gensim sums it in
    float32, so read it as a trend), and the neighbours are already sensible
    (cholesterol: hdl, triglycerides, ldl; broccoli: sprouts, spinach,
    cauliflower). ``--epochs`` raises it on a faster or idle machine.

Why all cores by default, and one thread with ``--deterministic``
    With two threads gensim's updates race, so two runs with the same seed give
    different vectors, and every model trained on them differs a little too:
    test NDCG@20 of the three Lex3 seeds moved by up to 0.007 between two
    reproductions (``reports/nfcorpus-rerun/``). One thread gives bit-identical
    vectors on every run; the model training is deterministic already. Measured
    on the idle 2-core machine, one run each, one after the other: 484 s with one
    thread, 350 s with two (415 s and 279 s of it training,
    ``reports/word2vec-threads/``). The first ``scripts/run.sh`` trains on a
    newcomer's machine, where those minutes count and the last bits of the vectors
    do not: on one AMD EPYC, Delta-32-Lex3 trained on four runs' two-thread vectors
    reached dev NDCG@20 0.2433 to 0.2533, 0.2490 on average, against 0.2501 for the
    one-thread vectors (``reports/first-run.md``): no loss on average, a spread from
    run to run. So ``esrr embeddings train`` uses every core it may run on
    (``fast_workers``), and ``--deterministic`` (``scripts/run.sh --reproduce``) one
    thread, for reproducing a table. ``meta.json`` says which (``recipe``,
    ``reproducible``).

Streaming: the corpus is tokenized once into a temporary LineSentence file (one
sentence a line) and read back by gensim's ``LineSentence`` every epoch; the word
counts are collected during that single pass (``build_vocab_from_freq``), so
there is no separate vocabulary scan. Re-tokenizing each epoch through the
text sources (``text_sources.iter_documents``) would cost those ~60 s of CPU again per
epoch, taken from the training threads. gensim's ``corpus_file`` mode ran no
faster here on 2 contended cores (147k vs 155k raw words/s on a 3M-token slice)
and its loss counter is per thread, so the iterable mode is used.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
from tqdm.auto import tqdm

from es_rerank import versions
from es_rerank.cli_options import sigterm_as_exit
from es_rerank.embeddings import (
    ARTIFACT_FORMAT,
    PAD,
    PAD_TOKEN,
    UNK,
    UNK_TOKEN,
    Embeddings,
    EmbeddingsError,
    current_version,
)
from es_rerank.machine import usable_cores
from es_rerank.settings import DEFAULT_NFCORPUS, missing_from_home
from es_rerank.text import embedding_tokens, tokenize
from es_rerank.versions import VersionNameError, check_version, is_locked, lock_folder, root_lock, write_pointer
from index_setup.readers import CorpusFormatError, read_queries
from index_setup.text_sources import (
    SOURCES,
    Deduplicator,
    Source,
    TextSourceError,
    format_error_message,
    iter_documents,
    iter_token_lists,
)

if TYPE_CHECKING:
    from gensim.models import KeyedVectors

logger = logging.getLogger(__name__)

UNK_RANGE = 0.25
DEFAULT_DATA = DEFAULT_NFCORPUS.parent
DEFAULT_MIN_COUNT = 2
DEFAULT_EPOCHS = 3
DETERMINISTIC_WORKERS = 1  # gensim's threads race: only one gives the same vectors every run
PARTIAL_NAME = ".{version}.partial"  # where a version is trained, hidden from the version listing
PARTIAL_GLOB = ".*.partial"


@dataclass(frozen=True)
class Word2VecParams:
    """Training parameters (paper section 4.1 plus the choices argued in the module docstring)."""

    vector_size: int = 300
    window: int = 5
    sg: int = 1
    hs: int = 1
    negative: int = 0
    min_count: int = DEFAULT_MIN_COUNT
    epochs: int = DEFAULT_EPOCHS
    sample: float = 1e-3
    alpha: float = 0.025
    min_alpha: float = 0.0001
    workers: int = DETERMINISTIC_WORKERS
    seed: int = 1
    unk_seed: int = 0


def fast_workers() -> int:
    """Threads of the fast recipe: every core this process may run on."""
    return usable_cores()


def recipe(params: Word2VecParams) -> str:
    """``deterministic`` (one thread: the same vectors on every run) or ``fast`` (several threads race)."""
    return "deterministic" if params.workers == DETERMINISTIC_WORKERS else "fast"


# --------------------------------------------------------------------------- coverage


def coverage(embeddings: Embeddings | set[str] | dict, token_lists: Sequence[Sequence[str]]) -> dict:
    """Share of tokens, distinct tokens and whole token lists known to the vocabulary."""
    known = embeddings.index if isinstance(embeddings, Embeddings) else embeddings
    tokens = [t for tl in token_lists for t in tl]
    types = set(tokens)
    return {
        "tokens": len(tokens),
        "types": len(types),
        "token_coverage": sum(t in known for t in tokens) / max(len(tokens), 1),
        "type_coverage": sum(t in known for t in types) / max(len(types), 1),
        "all_known": sum(all(t in known for t in tl) for tl in token_lists) / max(len(token_lists), 1),
    }


def nfcorpus_query_tokens(data_root: Path) -> list[list[str]]:
    """Embedding-path tokens of every NFCorpus query (empty when queries.jsonl is absent)."""
    path = Path(data_root) / "nfcorpus" / "queries.jsonl"
    if not path.is_file():
        return []
    try:
        queries = read_queries(path, strict=True)
    except CorpusFormatError as exc:
        raise TextSourceError(format_error_message(exc)) from exc
    return [embedding_tokens(tokenize(text)) for text in queries.values()]


# --------------------------------------------------------------------------- training


@dataclass
class CorpusCounts:
    """What one tokenization pass wrote: sentences, tokens and the word counts."""

    sentences: int = 0
    tokens: int = 0
    words: Counter = field(default_factory=Counter)
    tokens_with_whitespace: int = 0


_OTHER_WHITESPACE_RE = re.compile(r"[^\S ]")  # any whitespace but the plain space


def write_line_corpus(token_lists: Iterable[Sequence[str]], path: Path) -> CorpusCounts:
    """Write one sentence a line (tokens joined by spaces) and count the words.

    gensim's LineSentence splits lines on any whitespace, so a token that held
    some (none does with today's tokenizer; an earlier one kept the no-break space
    of ``95\\xa0%``) would be read back as several words that the counted
    vocabulary does not know. Such tokens are written and counted with their
    whitespace removed, and counted in ``tokens_with_whitespace`` (meta.json) so
    the tokenizer can be fixed.
    """
    counts = CorpusCounts()
    update = counts.words.update
    with Path(path).open("w", encoding="utf-8") as out:
        for tokens in token_lists:
            if not tokens:
                continue
            line = " ".join(tokens)
            if _OTHER_WHITESPACE_RE.search(line) or "  " in line or line[0] == " " or line[-1] == " ":
                fixed = ["".join(t.split()) for t in tokens]
                counts.tokens_with_whitespace += sum(a != b for a, b in zip(tokens, fixed))
                tokens = [t for t in fixed if t]
                if not tokens:
                    continue
                line = " ".join(tokens)
            out.write(line)
            out.write("\n")
            update(tokens)
            counts.sentences += 1
            counts.tokens += len(tokens)
    if counts.tokens_with_whitespace:
        logger.warning(
            "%d tokens held whitespace and were written without it; es_rerank.text.tokenize should not "
            "emit such tokens",
            counts.tokens_with_whitespace,
        )
    return counts


def _progress_word2vec_class():
    """A gensim Word2Vec whose progress reports drive a tqdm bar (gensim imported lazily)."""
    from gensim.models import Word2Vec

    class ProgressWord2Vec(Word2Vec):
        """Word2Vec that feeds its per-second progress reports and epoch ends to ``self.bar``.

        ``_log_progress``/``_log_epoch_end`` are gensim's own reporting hooks (there is
        no public intra-epoch callback in gensim 4); both still log as usual.
        """

        bar = None  # a tqdm bar while training
        epoch_report: list[dict]  # one dict per finished epoch, set by train_vectors

        def _log_progress(
            self,
            job_queue,
            progress_queue,
            cur_epoch,
            example_count,
            total_examples,
            raw_word_count,
            total_words,
            trained_word_count,
            elapsed,
        ):
            super()._log_progress(
                job_queue,
                progress_queue,
                cur_epoch,
                example_count,
                total_examples,
                raw_word_count,
                total_words,
                trained_word_count,
                elapsed,
            )
            if self.bar is not None:
                self.bar.n = cur_epoch * total_words + raw_word_count
                self.bar.set_postfix(
                    epoch=f"{cur_epoch + 1}/{self.epochs}",
                    words_s=f"{trained_word_count / max(elapsed, 1e-9):.0f}",
                    refresh=False,
                )
                self.bar.refresh()

        def _log_epoch_end(
            self,
            cur_epoch,
            example_count,
            total_examples,
            raw_word_count,
            total_words,
            trained_word_count,
            elapsed,
            is_corpus_file_mode,
        ):
            super()._log_epoch_end(
                cur_epoch,
                example_count,
                total_examples,
                raw_word_count,
                total_words,
                trained_word_count,
                elapsed,
                is_corpus_file_mode,
            )
            # All worker threads have finished the epoch here, so the accumulator can be
            # read and reset: a per-epoch sum loses less to gensim's float32 accumulator.
            loss = float(self.get_latest_training_loss())
            self.running_training_loss = 0.0
            report = {
                "epoch": cur_epoch + 1,
                "seconds": round(elapsed, 2),
                "raw_words": int(raw_word_count),
                "effective_words": int(trained_word_count),
                "loss": loss,
                "loss_per_word": loss / max(trained_word_count, 1),
            }
            self.epoch_report.append(report)
            if self.bar is not None:
                self.bar.n = (cur_epoch + 1) * total_words
                self.bar.set_postfix(
                    epoch=f"{cur_epoch + 1}/{self.epochs}",
                    loss_per_word=f"{report['loss_per_word']:.3f}",
                    refresh=False,
                )
                self.bar.refresh()
                self.bar.write(
                    f"epoch {cur_epoch + 1}/{self.epochs}: {elapsed:.0f}s, "
                    f"{trained_word_count / max(elapsed, 1e-9):.0f} effective words/s, "
                    f"loss/word {report['loss_per_word']:.3f}"
                )

    return ProgressWord2Vec


def train_vectors(
    corpus_path: Path, counts: CorpusCounts, params: Word2VecParams, progress: bool = True
) -> tuple[KeyedVectors, list[dict[str, float]]]:
    """Train word2vec on a LineSentence file; returns (gensim KeyedVectors, per-epoch report)."""
    from gensim.models.word2vec import LineSentence

    model_class = _progress_word2vec_class()
    model = model_class(
        vector_size=params.vector_size,
        window=params.window,
        sg=params.sg,
        hs=params.hs,
        negative=params.negative,
        min_count=params.min_count,
        sample=params.sample,
        alpha=params.alpha,
        min_alpha=params.min_alpha,
        workers=params.workers,
        seed=params.seed,
    )
    model.epoch_report = []
    model.build_vocab_from_freq(dict(counts.words), corpus_count=counts.sentences)
    if len(model.wv) == 0:
        raise EmbeddingsError(
            f"no word occurs {params.min_count} times in the {counts.tokens} training tokens; "
            "lower --min-count or give more text"
        )
    total = params.epochs * counts.tokens
    with tqdm(total=total, unit="word", unit_scale=True, desc="word2vec", disable=not progress) as bar:
        model.bar = bar
        model.train(
            LineSentence(str(corpus_path)),
            total_examples=counts.sentences,
            total_words=counts.tokens,
            epochs=params.epochs,
            compute_loss=True,
            report_delay=1.0,
        )
        model.bar = None
    return model.wv, model.epoch_report


def unk_vector(dim: int, seed: int) -> np.ndarray:
    """The UNK vector: U[-0.25, 0.25] from a fixed seed (Kim 2014, as in the paper)."""
    return np.random.default_rng(seed).uniform(-UNK_RANGE, UNK_RANGE, dim).astype(np.float32)


def new_version() -> str:
    """A version name from the current UTC time: ``w2v-<timestamp>``."""
    return versions.new_version("w2v-")


def _check_version(embeddings_dir: Path, version: str) -> None:
    try:
        check_version(version)
    except VersionNameError as error:
        raise EmbeddingsError(str(error)) from None
    if (embeddings_dir / version).exists():
        raise EmbeddingsError(
            f"{embeddings_dir / version} already exists; pass another --version or delete that directory"
        )


def _claim_partial(embeddings_dir: Path, version: str) -> tuple[Path, int]:
    """The folder that ``version`` is trained in and a descriptor holding its lock for the whole training.

    The leftovers of trainings that died (their locks are free) are deleted; a folder
    whose training still runs is refused: deleting it would leave that training waiting
    forever on its corpus file.
    """
    partial = embeddings_dir / PARTIAL_NAME.format(version=version)
    with root_lock(embeddings_dir):
        _check_version(embeddings_dir, version)
        if partial.exists() and _training_in(partial):
            raise EmbeddingsError(
                f"another `esrr embeddings train` is training version {version!r} in "
                f"{partial}; wait for it, or pass another --version"
            )
        for leftover in embeddings_dir.glob(PARTIAL_GLOB):  # of trainings killed outright, whatever their name
            if not _training_in(leftover):
                shutil.rmtree(leftover, ignore_errors=True)
        partial.mkdir()
        return partial, lock_folder(partial)


def _training_in(partial: Path) -> bool:
    """Whether a training holds the lock of its ``partial`` folder (False: it died, or removed it just now)."""
    try:
        return is_locked(partial)
    except FileNotFoundError:
        return False


def write_artifact(directory: Path, words: Sequence[str], word_vectors: np.ndarray, meta: dict, unk_seed: int) -> None:
    """Write vectors.npy, vocab.txt and meta.json into ``directory`` (which must exist)."""
    dim = word_vectors.shape[1]
    vectors = np.empty((len(words) + 2, dim), dtype=np.float32)
    vectors[PAD] = 0.0
    vectors[UNK] = unk_vector(dim, unk_seed)
    vectors[2:] = word_vectors
    np.save(directory / "vectors.npy", vectors)
    with (directory / "vocab.txt").open("w", encoding="utf-8", newline="\n") as out:
        for word in (PAD_TOKEN, UNK_TOKEN, *words):
            out.write(word)
            out.write("\n")
    (directory / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def train_embeddings(
    token_lists: Iterable[Sequence[str]],
    embeddings_dir: Path,
    params: Word2VecParams = Word2VecParams(),
    version: str | None = None,
    extra_meta: dict | Callable[[set[str]], dict] | None = None,
    progress: bool = True,
) -> Embeddings:
    """Train on token lists (sentences), write ``<embeddings_dir>/<version>/``, then ``CURRENT``.

    ``token_lists`` is read once (it may be a generator). ``extra_meta`` is merged
    into meta.json; a callable is called with the vocabulary (a set of words) after
    training, when the stream has been consumed (``train_from_data`` reports its
    sources and query coverage this way). Returns the artifact loaded back with ``mmap``.
    """
    import gensim

    started = time.perf_counter()
    embeddings_dir = Path(embeddings_dir)
    embeddings_dir.mkdir(parents=True, exist_ok=True)
    version = version or new_version()
    partial, lock = _claim_partial(embeddings_dir, version)
    try:
        corpus_path = partial / "corpus.txt"
        counts = write_line_corpus(token_lists, corpus_path)
        prepared = time.perf_counter()
        if counts.tokens == 0:
            raise EmbeddingsError("the training corpus is empty; check --data and --limit-docs")
        wv, epochs = train_vectors(corpus_path, counts, params, progress)
        trained = time.perf_counter()
        corpus_path.unlink()
        words = list(wv.index_to_key)
        known = sum(counts.words[w] for w in words)
        extra = extra_meta(set(words)) if callable(extra_meta) else extra_meta
        meta = {
            "format": ARTIFACT_FORMAT,
            "version": version,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tokenizer": "es_rerank.text: embedding_tokens(tokenize(sentence))",
            "gensim": gensim.__version__,
            "recipe": recipe(params),
            "reproducible": recipe(params) == "deterministic",
            "params": asdict(params),
            "unk_range": [-UNK_RANGE, UNK_RANGE],
            "rows": len(words) + 2,
            "dim": params.vector_size,
            "corpus": {
                "sentences": counts.sentences,
                "tokens": counts.tokens,
                "types": len(counts.words),
                "vocab_words": len(words),
                "token_coverage": known / counts.tokens,
                "tokens_with_whitespace": counts.tokens_with_whitespace,
            },
            "epochs": epochs,
            "seconds": {"prepare": round(prepared - started, 1), "train": round(trained - prepared, 1)},
            **(extra or {}),
        }
        meta["seconds"]["total"] = round(time.perf_counter() - started, 1)
        write_artifact(partial, words, wv.vectors, meta, params.unk_seed)
        with root_lock(embeddings_dir):  # where another training checks that the version is free
            os.replace(partial, embeddings_dir / version)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    finally:
        os.close(lock)
    write_pointer(embeddings_dir, version)  # last: CURRENT never names a half-written version
    return Embeddings.load(embeddings_dir / version)


def train_from_data(
    data_root: Path,
    embeddings_dir: Path,
    params: Word2VecParams = Word2VecParams(),
    version: str | None = None,
    limit_docs: int | None = None,
    sources: Sequence[Source] = SOURCES,
    progress: bool = True,
) -> Embeddings:
    """Train on every text source under ``data_root`` (deduplicated sentences); see ``train_embeddings``."""
    data_root = Path(data_root).resolve()
    dedup = Deduplicator()
    per_source: dict[str, dict[str, int]] = {}

    def stream() -> Iterator[list[str]]:
        docs = iter_documents(data_root, sources, limit_docs, dedup)
        bar = tqdm(docs, unit="doc", desc="tokenize", disable=not progress)
        for doc, tokens in iter_token_lists(bar):
            tally = per_source.setdefault(doc.source, {"sentences": 0, "tokens": 0})
            tally["sentences"] += 1
            tally["tokens"] += len(tokens)
            yield tokens

    queries = nfcorpus_query_tokens(data_root)

    def extra_meta(vocab: set[str]) -> dict:
        meta: dict = {"data_root": str(data_root), "limit_docs": limit_docs, "sources": {}}
        for source in sources:
            meta["sources"][source.name] = {
                "files": [str(p.relative_to(data_root)) for p in source.files(data_root)],
                "docs": dedup.kept.get(source.name, 0),
                "duplicates_dropped": dedup.dropped.get(source.name, 0),
                **per_source.get(source.name, {"sentences": 0, "tokens": 0}),
            }
        if queries:
            meta["nfcorpus_query_coverage"] = coverage(vocab, queries)
        return meta

    return train_embeddings(stream(), embeddings_dir, params, version, extra_meta, progress)


# --------------------------------------------------------------------------- CLI


def _embeddings_dir(out: Path | None) -> Path:
    from es_rerank.cli_options import load_settings

    return Path(out) if out is not None else load_settings().embeddings_dir


@click.group("embeddings")
def embeddings() -> None:
    """Train and inspect the word2vec embeddings of the Delta model."""


@embeddings.command("train")
@click.option(
    "--data",
    "data_root",
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_DATA,
    show_default=True,
    help="shared data root holding nfcorpus/, ohsumed-single23/, ...",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="embeddings directory [default: $ESRR_HOME/embeddings]",
)
@click.option("--min-count", type=click.IntRange(min=1), default=DEFAULT_MIN_COUNT, show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=DEFAULT_EPOCHS, show_default=True)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="training threads; more than one is faster but not reproducible [default: every core, 1 with --deterministic]",
)
@click.option(
    "--deterministic", is_flag=True, help="one thread: the same vectors on every run, for reproducing a table (slower)"
)
@click.option("--version", "version", default=None, help="version name [default: w2v-<UTC time>]")
@click.option("--limit-docs", type=click.IntRange(min=1), default=None, help="at most this many docs per source")
@click.option("-v", "--verbose", is_flag=True, help="also show gensim's own log")
def train_command(
    data_root: Path,
    out: Path | None,
    min_count: int,
    epochs: int,
    workers: int | None,
    deterministic: bool,
    version: str | None,
    limit_docs: int | None,
    verbose: bool,
) -> None:
    """Train word2vec on all biomedical text and make it the CURRENT embeddings.

    By default on every core, whose threads race: each run gives slightly different
    vectors. --deterministic trains on one thread and gives the same vectors every run.
    """
    if deterministic and workers not in (None, DETERMINISTIC_WORKERS):
        raise click.UsageError(f"--deterministic trains on one thread; drop --workers {workers}, or --deterministic")
    if workers is None:
        workers = DETERMINISTIC_WORKERS if deterministic else fast_workers()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("gensim").setLevel(logging.INFO if verbose else logging.WARNING)
    params = Word2VecParams(min_count=min_count, epochs=epochs, workers=workers)
    embeddings_dir = _embeddings_dir(out)
    try:
        with sigterm_as_exit():  # the half-written version is removed, as on Ctrl-C
            emb = train_from_data(data_root, embeddings_dir, params, version, limit_docs)
    except (EmbeddingsError, TextSourceError) as exc:
        raise click.ClickException(str(exc)) from exc
    _print_info(emb, embeddings_dir / emb.version)


def _print_info(emb: Embeddings, directory: Path) -> None:
    meta = emb.meta
    click.echo(f"version      {emb.version}  ({directory})")
    click.echo(f"table        {len(emb):,} rows x {emb.dim} (PAD, UNK + {len(emb) - 2:,} words)")
    _print_meta(
        "corpus",
        meta,
        lambda c: (
            f"{c['tokens']:,} tokens, {c['sentences']:,} sentences, {c['types']:,} "
            f"types; {c['token_coverage']:.2%} of tokens in vocabulary"
        ),
    )
    _print_meta(
        "recipe",
        meta,
        lambda r: (
            "deterministic (one thread): the same vectors on every run"
            if r == "deterministic"
            else f"{r} ({meta['params']['workers']} threads): the vectors differ "
            "from run to run; `esrr embeddings train --deterministic` gives the same ones every time"
        ),
    )
    _print_meta(
        "params",
        meta,
        lambda p: (
            f"min_count={p['min_count']} epochs={p['epochs']} window={p['window']} "
            f"sg={p['sg']} hs={p['hs']} sample={p['sample']}"
        ),
    )
    _print_meta("seconds", meta, str)
    _print_meta(
        "nfcorpus_query_coverage",
        meta,
        lambda c: (
            f"{c['token_coverage']:.1%} of tokens, "
            f"{c['type_coverage']:.1%} of distinct words, {c['all_known']:.1%} of queries fully in vocabulary"
        ),
    )


def _print_meta(key: str, meta: dict, describe: Callable[[Any], str]) -> None:
    """One line for ``meta[key]`` if present; a hand-edited or older meta.json only costs that line."""
    if not meta.get(key):
        return
    label = "NFCorpus queries:" if key == "nfcorpus_query_coverage" else key
    try:
        click.echo(f"{label:<12} {describe(meta[key])}")
    except (KeyError, TypeError, ValueError) as error:
        click.echo(f"{label:<12} (meta.json's {key!r} entry is incomplete: {type(error).__name__} {error})")


@embeddings.command("info")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="embeddings directory [default: $ESRR_HOME/embeddings]",
)
@click.option("--version", "version", default=None, help="a version other than CURRENT")
@click.option("--neighbours", "-n", multiple=True, help="show the nearest words of this word (repeatable)")
@click.option("-k", type=click.IntRange(1, 1000), default=8, show_default=True, help="Nearest words shown.")
def info_command(out: Path | None, version: str | None, neighbours: tuple[str, ...], k: int) -> None:
    """Describe the CURRENT (or a named) embeddings version."""
    embeddings_dir = _embeddings_dir(out)
    try:
        version = check_version(version) if version is not None else current_version(embeddings_dir)
        if version is None:
            raise EmbeddingsError(
                missing_from_home(
                    f"no trained embeddings in {embeddings_dir.absolute()}",
                    "train them there with `esrr embeddings train`",
                )
            )
        emb = Embeddings.load(embeddings_dir / version)
    except (EmbeddingsError, VersionNameError) as exc:
        raise click.ClickException(str(exc)) from exc
    _print_info(emb, embeddings_dir / version)
    for word in neighbours:
        token = (embedding_tokens(tokenize(word)) or [word])[0]
        try:
            near = emb.nearest(token, k)
        except KeyError as exc:
            click.echo(f"{token}: not in the vocabulary ({exc})")
            continue
        click.echo(f"{token}: " + ", ".join(f"{w} {s:.2f}" for w, s in near))
