"""What a worker process loads once: checkpoint(s), embeddings, scorer, batcher, stats tables.

``get_runtime()`` is the per-process singleton. It loads lazily, on first use,
in the process that scores: with the threads or solo pool that is the worker
process itself, with prefork each child after the fork, so CUDA is never
initialised in a parent that then forks. A runtime remembers the pid it was
loaded in and is rebuilt if it finds itself in another process.

A request carries document tokens as ids in the statistics vocabulary of its
index version; ``stats_table`` maps that vocabulary to embedding rows once per
version (``embeddings.lookup(stats.vocab.terms)``) and keeps the last few
versions, so a reindex is picked up by the next request without a restart.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from es_rerank.embeddings import UNK, Embeddings, EmbeddingsError
from es_rerank.payload import DOC_LEN, DOC_PAD, LexFeaturesMismatch, PayloadError, ScoreRequest, WorkerSetupError
from es_rerank.settings import missing_from_home
from es_rerank.stats import CorpusStats, StatsError, saved_build_id
from es_rerank.versions import VersionNameError, check_version
from worker.batching import BatchFuture, MicroBatcher, result_or_cancel
from worker.ensemble import EnsembleScorer
from worker.inputs import query_rows, term_rows
from worker.model import PAD_ID, Checkpoint
from worker.scorer import DeltaScorer, resolve_device
from worker.served_checks import IndexFit, ScaleMonitor, index_fit
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)

Prepared = tuple[np.ndarray, np.ndarray, np.ndarray]  # query_rows [M], doc_rows [n, N], lex [n, L]


def find_stats_dir(settings: WorkerSettings, version: str, build_id: str | None = None) -> Path:
    """The statistics directory of index ``version``: ``<indexes_dir>/<backend>/<version>/stats``.

    When several backends hold the version, the one holding build ``build_id`` wins, else
    the configured backend's: one worker may serve gateways of both backends.
    """
    try:
        check_version(version)
    except VersionNameError as error:
        raise PayloadError(f"stats_version {version!r} is not a valid index version name ({error})") from None
    root = settings.indexes_dir
    found = sorted(root.glob(f"*/{version}/stats"))
    if not found:
        raise WorkerSetupError(
            f"no statistics for index version {version!r} under {root}/*/{version}/stats; the worker "
            f"must read the same ESRR_HOME ({settings.home}) as the gateway (a shared volume), and "
            "the index must have been built there (`esrr index build`); a copied index version serves "
            "under the name it was built with, so keep the original folder or rebuild"
        )
    holding = [path for path in found if build_id is not None and saved_build_id(path) == build_id]
    preferred = [path for path in found if path.parent.parent.name == settings.backend]
    return (holding or preferred or found)[0]


def embeddings_version_dir(settings: WorkerSettings, version: str) -> Path:
    """The embeddings artifact for a checkpoint trained on embeddings ``version``."""
    if settings.embeddings is not None:
        if not (settings.embeddings / "vectors.npy").is_file():
            raise WorkerSetupError(
                f"ESRR_EMBEDDINGS={settings.embeddings} holds no vectors.npy; point "
                "it at an embeddings directory (`esrr embeddings train`)"
            )
        return settings.embeddings
    root = settings.embeddings_dir
    for candidate in (root / version, root):
        if (candidate / "vectors.npy").is_file():
            return candidate
    raise WorkerSetupError(
        f"no embeddings version {version!r} at {root / version} or {root}; train "
        "them (`esrr embeddings train`) or set ESRR_EMBEDDINGS to their directory"
    )


def scoring_device(settings: WorkerSettings) -> torch.device:
    """The device the worker scores on, checked (before a fork too); ``WorkerSetupError`` names the fix."""
    try:
        return resolve_device(settings.device)
    except ValueError as error:
        raise WorkerSetupError(f"{error} (ESRR_DEVICE={settings.device})") from error


def _scorer(
    path: Path, checkpoint: Checkpoint, embeddings: Embeddings, directory: Path, device: torch.device
) -> DeltaScorer:
    try:
        model = checkpoint.build_model(embeddings.vectors)
    except (ValueError, RuntimeError) as error:
        raise WorkerSetupError(
            f"checkpoint {path} does not fit embeddings {directory}, or its weights are damaged "
            f"({error}); retrain with `esrr train`, or point ESRR_CHECKPOINT at a model "
            "trained on these embeddings"
        ) from error
    return DeltaScorer.from_model(model, device)


def _load_embeddings(directory: Path) -> Embeddings:
    try:
        return Embeddings.load(directory, mmap=False)  # in memory: torch shares it without a copy
    except (EmbeddingsError, FileNotFoundError, ValueError) as error:
        raise WorkerSetupError(f"cannot load embeddings at {directory}: {error}") from error


def _load_checkpoint(path: Path, named: bool) -> Checkpoint:
    try:
        checkpoint = Checkpoint.load(path)
    except (FileNotFoundError, ValueError) as error:
        if isinstance(error, FileNotFoundError) and not named:  # <home>/models: perhaps run from another folder
            raise WorkerSetupError(
                missing_from_home(
                    f"no model checkpoint at {path.absolute()}",
                    f"train one there with `{Checkpoint.TRAIN_COMMAND}` (`bash scripts/run.sh --train` trains the "
                    "embeddings too), or set ESRR_CHECKPOINT to a trained one",
                )
            ) from error
        fix = "check ESRR_CHECKPOINT, which names it" if named else "or set ESRR_CHECKPOINT"
        raise WorkerSetupError(f"{error} ({fix})") from error
    if checkpoint.config.doc_len != DOC_LEN:
        raise WorkerSetupError(
            f"checkpoint {path} reads {checkpoint.config.doc_len} document tokens, "
            f"the payload carries {DOC_LEN}; retrain with doc_len={DOC_LEN}"
        )
    return checkpoint


def describe_setup(
    settings: WorkerSettings, checkpoints: Sequence[Checkpoint], device: torch.device, embeddings: str
) -> dict[str, str]:
    """What a worker serves and where from (a prefork parent says it too, before any child loads it)."""
    paths = settings.checkpoint_paths
    return {
        "model": (
            f"{paths[0].stem} ({paths[0]})"
            if len(paths) == 1
            else f"ensemble of {len(paths)} ({', '.join(map(str, paths))})"
        ),
        "lex features": ", ".join(checkpoints[0].config.lex_names) or "none",
        "embeddings": embeddings,
        "statistics": f"{settings.indexes_dir}/*/<version>/stats, per request",
        "device": str(device),
    }


def load_checkpoints(settings: WorkerSettings) -> tuple[Checkpoint, ...]:
    """The served checkpoint(s), checked against the payload and each other; ``WorkerSetupError`` names the fix."""
    paths = settings.checkpoint_paths
    checkpoints = tuple(_load_checkpoint(path, named=bool(settings.checkpoint)) for path in paths)
    _check_ensemble(paths, checkpoints)
    return checkpoints


def _check_ensemble(paths: Sequence[Path], checkpoints: Sequence[Checkpoint]) -> None:
    """Members of one ensemble answer the same request: same embeddings, Lex features, query length."""
    first, config = checkpoints[0], checkpoints[0].config
    for path, checkpoint in zip(paths[1:], checkpoints[1:]):
        differences = [
            f"{name} {theirs!r} against {ours!r}"
            for name, theirs, ours in [
                ("embeddings", checkpoint.embeddings_version, first.embeddings_version),
                ("Lex features", list(checkpoint.config.lex_names), list(config.lex_names)),
                ("query length", checkpoint.config.query_len, config.query_len),
            ]
            if theirs != ours
        ]
        if differences:
            raise WorkerSetupError(
                f"ensemble member {path} does not fit {paths[0]}: {'; '.join(differences)}; "
                "serve together only models trained on the same embeddings and features"
            )


@dataclass(frozen=True)
class _StatsTable:
    """One statistics build's term -> embedding row table, where that build lives, and how the model fits it."""

    directory: Path
    build_id: str
    table: np.ndarray
    fit: IndexFit | None = None


@dataclass
class Runtime:
    """Everything one process needs to score requests."""

    settings: WorkerSettings
    checkpoint_paths: tuple[Path, ...]
    checkpoints: tuple[Checkpoint, ...]  # one, or the members of an ensemble
    embeddings_path: Path
    embeddings: Embeddings
    scorer: DeltaScorer | EnsembleScorer
    batcher: MicroBatcher
    pid: int = field(default_factory=os.getpid)
    scale: ScaleMonitor | None = None
    _tables: OrderedDict[str, _StatsTable] = field(default_factory=OrderedDict)
    _tables_lock: threading.Lock = field(default_factory=threading.Lock)
    _load_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def load(cls, settings: WorkerSettings) -> Runtime:
        """Load the checkpoint(s), embeddings and scorer; ``WorkerSetupError`` names the fix."""
        paths = settings.checkpoint_paths
        checkpoints = load_checkpoints(settings)
        version = checkpoints[0].embeddings_version
        directory = embeddings_version_dir(settings, version)
        embeddings = _load_embeddings(directory)
        if embeddings.version != version:
            raise WorkerSetupError(
                f"checkpoint {paths[0]} was trained on embeddings {version!r} but "
                f"{directory} holds {embeddings.version!r}; point ESRR_EMBEDDINGS at the right version "
                "or retrain the model on these embeddings"
            )
        if settings.torch_threads:
            torch.set_num_threads(settings.torch_threads)
        device = scoring_device(settings)
        scorers = [
            _scorer(path, checkpoint, embeddings, directory, device) for path, checkpoint in zip(paths, checkpoints)
        ]
        scorer = scorers[0] if len(scorers) == 1 else EnsembleScorer(scorers)
        batcher = MicroBatcher(
            scorer.score_many,
            max_wait_s=settings.batch_wait_ms / 1000,
            max_requests=settings.batch_max_requests,
            max_items=settings.batch_max_docs,
            size=lambda item: item[1].shape[0],
        )
        state = checkpoints[0].state_dict
        scale = (
            ScaleMonitor(checkpoints[0].config.lex_names, state["lex_mean"].numpy(), state["lex_std"].numpy())
            if checkpoints[0].config.lex_names
            else None
        )
        runtime = cls(settings, paths, checkpoints, directory, embeddings, scorer, batcher, scale=scale)
        runtime.check_served_index()
        log.info("loaded: %s", "; ".join(f"{key}: {value}" for key, value in runtime.describe().items()))
        return runtime

    def check_served_index(self) -> IndexFit | None:
        """Load the embedded index served now, checking how the model fits it (logged); None if none is served.

        Elasticsearch's statistics are checked on the first request that names them (``stats_table``),
        as are those of every index a reindex swaps in.
        """
        from es_rerank.versions import VersionNameError, read_pointer

        try:
            version = read_pointer(self.settings.indexes_dir / "embedded")
        except VersionNameError:
            return None  # the gateway says what is wrong with the pointer, at its first search
        if version is None or self.settings.backend != "embedded":
            return None
        try:
            self.stats_table(version)
        except (WorkerSetupError, PayloadError) as error:
            log.warning("cannot check the served index %s now: %s", version, error)
            return None
        with self._tables_lock:
            held = self._tables.get(version)
        return held.fit if held is not None else None

    @property
    def checkpoint(self) -> Checkpoint:
        """The served checkpoint (an ensemble's first member: all share its inputs)."""
        return self.checkpoints[0]

    @property
    def model_name(self) -> str:
        """The checkpoint's name; an ensemble's members' names joined by '+'."""
        return "+".join(path.stem for path in self.checkpoint_paths)

    @property
    def lex_names(self) -> tuple[str, ...]:
        """The Lex features the served model reads, in its order."""
        return tuple(self.checkpoint.config.lex_names)

    def describe(self) -> dict[str, str]:
        """Where the model, embeddings and statistics come from, and how the model fits them (logs, the CLI)."""
        embeddings = f"{self.embeddings.version} ({self.embeddings_path}, {self.embeddings.vectors.shape[0]} words)"
        described = describe_setup(self.settings, self.checkpoints, self.scorer.device, embeddings)
        with self._tables_lock:
            fits = [held.fit for held in self._tables.values() if held.fit is not None]
        for fit in fits:
            described[f"fit to {fit.version}"] = fit.summary() + "".join(f"; WARNING: {w}" for w in fit.warnings)
        return described

    def stats_table(self, version: str, build_id: str | None = None) -> np.ndarray:
        """int64 [n_terms] embedding row of each term of statistics ``version`` (LRU-cached).

        A cached table is kept unless its folder holds another build: a version name
        that a prune freed can be built again, with another vocabulary. A folder gone or
        not yet complete keeps it: a gateway may still search the version it describes.
        ``build_id`` (the request's ``stats_build``), when given, must be the build held.
        """
        with self._tables_lock:
            cached = self._tables.get(version)
        held = cached if cached is not None and saved_build_id(cached.directory) in (None, cached.build_id) else None
        if held is None or build_id not in (None, held.build_id):
            directory = find_stats_dir(self.settings, version, build_id)
            # Another backend's folder may hold the build asked for; none holding it: refuse, do not reload.
            if held is None or saved_build_id(directory) == build_id:
                held = self._load_table(version, cached, directory)
        with self._tables_lock:
            if self._tables.get(version) is held:
                self._tables.move_to_end(version)
        if build_id is not None and held.build_id != build_id:
            raise WorkerSetupError(
                f"the request's statistics {version!r} are build {build_id}, but no folder "
                f"{self.settings.indexes_dir}/*/{version}/stats holds it (this worker's are "
                f"build {held.build_id}, {held.directory}): the gateway and the worker read "
                "different folders for that version; give them one ESRR_HOME (or the same "
                "copy of it)"
            )
        return held.table

    def _load_table(self, version: str, stale: _StatsTable | None, directory: Path) -> _StatsTable:
        """Load and cache the table of the statistics in ``directory`` (``stale`` is the one replaced)."""
        with self._load_lock:  # one load at a time; others re-check the cache afterwards
            with self._tables_lock:
                fresh = self._tables.get(version)
            if fresh is not None and fresh is not stale and fresh.directory == directory:
                return fresh
            try:
                stats = CorpusStats.load(directory)
            except StatsError as error:
                raise WorkerSetupError(str(error)) from error
            if stats.version != version:
                raise WorkerSetupError(
                    f"{directory} holds statistics version {stats.version!r}, not {version!r}; rebuild that index"
                )
            table = term_rows(stats.vocab.terms, self.embeddings)
            fit = index_fit(stats, table, self.lex_names)
            log.info(
                "statistics %s (build %s): %d terms, %d without an embedding; %s",
                version,
                stats.build_id,
                len(table),
                int((table == UNK).sum()),
                fit.summary(),
            )
            for warning in fit.warnings:
                log.warning("%s", warning)
            loaded = _StatsTable(directory, stats.build_id, table, fit)
            with self._tables_lock:
                self._tables[version] = loaded
                self._tables.move_to_end(version)
                while len(self._tables) > self.settings.stats_cache_size:
                    self._tables.popitem(last=False)
            return loaded

    def prepare(self, request: ScoreRequest) -> Prepared:
        """(query_rows int64 [M], doc_rows int64 [n, N], lex float32 [n, L], L may be 0) for the scorer."""
        if request.lex_names != self.lex_names:
            raise LexFeaturesMismatch(
                f"the request carries Lex features {list(request.lex_names)}, model "
                f"{self.model_name} was trained with {list(self.lex_names)}; set "
                f"ESRR_LEX_FEATURES={','.join(self.lex_names)} where the gateway or `esrr "
                "search --worker` runs",
                ",".join(self.lex_names),
            )
        table = self.stats_table(request.stats_version, request.stats_build or None)  # "": unchecked
        docs = request.doc_tokens
        if docs.size and int(docs.max()) >= len(table):
            raise PayloadError(
                f"doc_tokens holds id {int(docs.max())} but statistics version "
                f"{request.stats_version!r} has {len(table)} terms; the gateway and the "
                "worker read different statistics for that version"
            )
        doc_rows = np.where(docs == DOC_PAD, PAD_ID, table[np.maximum(docs, 0)])  # [n, N]
        rows = query_rows(request.query_tokens, self.embeddings, self.checkpoint.config.query_len)  # [M]
        drift = self.scale.observe(request.lex) if self.scale is not None else None
        if drift is not None:
            log.warning("%s", drift)
        return rows, doc_rows.astype(np.int64, copy=False), request.lex

    def submit(self, request: ScoreRequest) -> BatchFuture[np.ndarray]:
        """Queue a request for the next forward pass; the future's result is float32 [n] scores.

        ``future.batch_size`` (once done) is the number of requests that shared the pass.
        """
        if request.n == 0:
            future: BatchFuture[np.ndarray] = BatchFuture()
            future.set_result(np.zeros(0, dtype=np.float32))
            return future
        return self.batcher.submit(self.prepare(request))

    def score(self, request: ScoreRequest, timeout: float | None = None) -> np.ndarray:
        """float32 [n] scores of the request's documents, in their order (micro-batched)."""
        return np.asarray(result_or_cancel(self.submit(request), timeout), dtype=np.float32)

    def close(self) -> None:
        """Score what the batcher holds, then stop it."""
        self.batcher.close()


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def get_runtime(settings: WorkerSettings | None = None) -> Runtime:
    """This process's runtime, loaded on first call (thread-safe, fork-aware)."""
    global _runtime
    runtime = _runtime
    if runtime is not None and runtime.pid == os.getpid():
        return runtime
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = Runtime.load(settings or WorkerSettings())
        return _runtime


def close_runtime() -> None:
    """Stop this process's batcher (worker shutdown)."""
    global _runtime
    with _runtime_lock:
        if _runtime is not None and _runtime.pid == os.getpid():
            _runtime.close()
        _runtime = None
