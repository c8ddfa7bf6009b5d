"""The pipeline a process serves, assembled from the settings and ``PipelineOptions``.

``esrr search``, ``batch-search``, ``eval``, ``bench search``, ``esrr serve`` and the library's
``es_rerank.open_search`` build it here, so each serves the same stages. A stage left
``Switch.AUTO`` runs where it is set up: a trained model, a feedback weight above 0, the votes
file. What cannot be served raises ``es_rerank.errors.SetupError`` (``OptionsError`` for options
that contradict each other) with the fix; the commands make CLI errors of them (``es_rerank.cli``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from es_rerank.errors import OptionsError, SetupError
from es_rerank.settings import BrokerSettings, CommonSettings, missing_from_home

if TYPE_CHECKING:
    from es_rerank.backends.base import SearchBackend
    from es_rerank.ranking.dispatch import WorkerReranker
    from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams
    from es_rerank.ranking.neighbours import JudgedNeighbours
    from es_rerank.ranking.pipeline import Reranker, SearchPipeline


class Switch(Enum):
    """A stage asked for, refused, or on where it is set up (a command's ``--x/--no-x`` left unsaid)."""

    ON = "on"
    OFF = "off"
    AUTO = "where set up"

    @classmethod
    def of(cls, flag: bool | None) -> Switch:
        """The switch of a ``--x/--no-x`` flag: True on, False off, None where set up."""
        return cls.AUTO if flag is None else cls.ON if flag else cls.OFF

    def decided(self, set_up: bool) -> bool:
        """Whether the stage runs: asked for, or left to where it is ``set_up``."""
        return self is Switch.ON or (self is Switch.AUTO and set_up)


@dataclass(frozen=True)
class PipelineOptions:
    """Which stages run over the top ``window`` hits, and how the model scores.

    ``keep_vectors`` keeps the feedback's document vectors between queries, for a process
    that serves many (``ESRR_FEEDBACK_CACHE_DOCUMENTS`` bounds them); one query gains nothing.
    ``via_worker`` has a running worker score (``ESRR_BROKER_URL``, ``ESRR_QUEUE``) instead of
    loading the model here; whether a model is served is then the worker's business.
    ``local_reranker`` makes the model that scores in this process (``worker.local.LocalReranker``),
    handed in by the caller so that this room never imports the worker's code.
    ``backend`` searches another index than the served one (``esrr eval --data``'s own).
    """

    window: int
    rerank: Switch = Switch.AUTO
    feedback: Switch = Switch.AUTO
    neighbours: Switch = Switch.AUTO
    keep_vectors: bool = False
    via_worker: bool = False
    local_reranker: Callable[[], Reranker] | None = None
    backend: SearchBackend | None = None

    @property
    def model(self) -> Switch:
        """The model's switch: a worker scores whenever one is named."""
        return Switch.ON if self.via_worker else self.rerank


def assemble(settings: BrokerSettings, options: PipelineOptions) -> SearchPipeline:
    """The stages over the top ``options.window`` hits, each on when asked, off when refused, else where set up;
    ``SetupError`` names what stops one."""
    from es_rerank.ranking.pipeline import SearchPipeline

    check_options(settings, options)
    window = options.window
    neighbours = (
        _load_neighbours(settings)
        if options.neighbours.decided(settings.neighbours_path.is_file() and window > 0)
        else None
    )
    backend = options.backend if options.backend is not None else _open_backend(settings)
    reranker = _reranker(settings, options)
    feedback, cache = _feedback(settings, options)
    guard = settings.bm25_guard_weight if reranker is not None else 0.0
    return SearchPipeline(backend, window, reranker, feedback, neighbours, cache, guard, settings.breaker_refine)


def served_pipeline(
    settings: BrokerSettings,
    window: int,
    *,
    rerank: bool | None = None,
    use_feedback: bool | None = None,
    use_neighbours: bool | None = None,
    keep_vectors: bool = False,
    via_worker: bool = False,
    local_reranker: Callable[[], Reranker] | None = None,
    backend: SearchBackend | None = None,
) -> SearchPipeline:
    """``assemble`` with the switches as a command's flags (None: where set up)."""
    options = PipelineOptions(
        window,
        Switch.of(rerank),
        Switch.of(use_feedback),
        Switch.of(use_neighbours),
        keep_vectors,
        via_worker,
        local_reranker,
        backend,
    )
    return assemble(settings, options)


def check_options(settings: BrokerSettings, options: PipelineOptions) -> None:
    """``OptionsError`` for options that contradict each other or the settings, ``SetupError`` for a checkpoint
    named and missing (it must not fall back to BM25 quietly; a worker checks its own)."""
    if options.via_worker and options.rerank is Switch.OFF:
        raise OptionsError("--worker sends the window to a worker to rerank; drop --no-rerank, or --worker")
    missing = [] if options.via_worker else [str(path) for path in settings.checkpoint if not path.is_file()]
    if missing and options.rerank is not Switch.OFF:
        raise SetupError(
            f"ESRR_CHECKPOINT names {', '.join(missing)}, which does not exist; fix the "
            "path, or unset it to serve <home>/models (`esrr search --no-rerank` "
            "searches without the model)"
        )
    model_option = "--worker" if options.via_worker else "--rerank"
    for option, switch in (
        (model_option, options.model),
        ("--feedback", options.feedback),
        ("--neighbours", options.neighbours),
    ):
        if switch is Switch.ON and not options.window:
            raise OptionsError(f"{option} reorders the top --window hits; give a window above 0")
    if options.feedback is Switch.ON and settings.feedback_weight == 0:
        raise OptionsError(
            "--feedback asks for candidate feedback, but ESRR_FEEDBACK_WEIGHT is 0; "
            "set it above 0, or unset it for the default"
        )


def model_note(settings: BrokerSettings, options: PipelineOptions) -> str | None:
    """Why the pipeline of ``options`` ranks without the model although none was refused: none is trained yet
    (None: the model scores, or was turned off)."""
    checkpoint = settings.checkpoint_path
    if options.model is not Switch.AUTO or options.window == 0 or checkpoint.is_file():
        return None
    return "not reranked: " + missing_from_home(
        f"no model at {checkpoint.absolute()}",
        "train the embeddings and the model with `bash scripts/run.sh --train`, or `esrr embeddings train` then "
        "`esrr train`",
    )


def _reranker(settings: BrokerSettings, options: PipelineOptions) -> Reranker | None:
    """The model's scores: a worker's, this process's (``local_reranker``), or none."""
    if options.via_worker:
        return _worker_reranker(settings)
    if not options.rerank.decided(settings.checkpoint_path.is_file() and options.window > 0):
        return None
    if options.local_reranker is None:
        raise OptionsError(
            "this command scores only through a worker; drop --rerank, or use `esrr search`, which can load the "
            "model itself (from Python: PipelineOptions with local_reranker=worker.local.LocalReranker, or "
            "via_worker=True)"
        )
    return options.local_reranker()


def _feedback(
    settings: CommonSettings, options: PipelineOptions
) -> tuple[FeedbackParams | None, DocumentVectorCache | None]:
    """The candidate feedback's parameters and its vector cache (``keep_vectors``), or none when it is off."""
    if not options.feedback.decided(settings.feedback_weight > 0 and options.window > 0):
        return None, None
    from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams  # scipy: only where feedback runs
    from es_rerank.ranking.heaviest_terms import warm_up as warm_vectors
    from es_rerank.ranking.similar_hits import warm_up

    warm_up()  # the compiled kernels (nearest hits, document vectors), now rather than on the first search
    warm_vectors()
    kept = settings.feedback_cache_documents if options.keep_vectors else 0
    return FeedbackParams.from_settings(settings), DocumentVectorCache(kept) if kept else None


def _open_backend(settings: CommonSettings) -> SearchBackend:
    """The served index of ``settings``; ``SetupError`` when it cannot be opened."""
    from es_rerank.backends import BackendError, open_backend

    try:
        return open_backend(settings)
    except BackendError as error:
        raise SetupError(str(error)) from error


def _worker_reranker(settings: BrokerSettings) -> WorkerReranker:
    """Scores from the workers on ``settings``' broker and queue, within ``ESRR_SCORE_DEADLINE_S``, behind a
    circuit breaker and the queue's cap."""
    from es_rerank.ranking.breaker import CircuitBreaker
    from es_rerank.ranking.broker import client_app
    from es_rerank.ranking.dispatch import WorkerReranker

    breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_cooldown_s)
    return WorkerReranker(
        client_app(settings),
        settings.queue,
        settings.score_deadline_s,
        settings.lex_features,
        breaker=breaker,
        max_queued=settings.queue_max_tasks,
    )


def _load_neighbours(settings: CommonSettings) -> JudgedNeighbours:
    """The judged-neighbours file of ``settings``; ``SetupError`` naming the fix."""
    from es_rerank.ranking.neighbours import JudgedNeighbours, NeighboursError

    try:
        return JudgedNeighbours.load(settings.neighbours_path)
    except NeighboursError as error:
        raise SetupError(str(error)) from error
