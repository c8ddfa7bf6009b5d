"""The pipeline that ``esrr search`` serves, assembled from the settings and the search options.

``esrr bench search`` times the same assembly. Options left unsaid (None) turn a stage
on where it is set up: a trained model, a feedback weight above 0, the votes file.
Problems are click errors that name the fix, as both callers are commands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from es_rerank.settings import BrokerSettings, CommonSettings, missing_from_home

if TYPE_CHECKING:
    from es_rerank.backends.base import SearchBackend
    from es_rerank.ranking.dispatch import WorkerReranker
    from es_rerank.ranking.neighbours import JudgedNeighbours
    from es_rerank.ranking.pipeline import Reranker, SearchPipeline


def served_pipeline(
    settings: BrokerSettings,
    window: int,
    rerank: bool | None = None,
    use_feedback: bool | None = None,
    use_neighbours: bool | None = None,
    keep_vectors: bool = False,
    via_worker: bool = False,
    local_reranker: Callable[[], Reranker] | None = None,
    backend: SearchBackend | None = None,
) -> SearchPipeline:
    """The stages over the top ``window`` hits, each on when asked, off when refused, else where set up.

    ``keep_vectors`` keeps the feedback's document vectors between queries, for a process
    that serves many (``ESRR_FEEDBACK_CACHE_DOCUMENTS`` bounds them); one query gains nothing.
    ``via_worker`` has a running worker score (``ESRR_BROKER_URL``, ``ESRR_QUEUE``) instead of
    loading the model here; whether a model is served is then the worker's business.
    ``local_reranker`` makes the model that scores in this process (``worker.local.LocalReranker``),
    handed in by the caller so that this room never imports the worker's code.
    ``backend`` searches another index than the served one (``esrr eval --data``'s own).
    """
    from es_rerank.backends import BackendError, open_backend
    from es_rerank.ranking.pipeline import SearchPipeline

    checkpoint = settings.checkpoint_path
    if via_worker and rerank is False:
        raise click.UsageError("--worker sends the window to a worker to rerank; drop --no-rerank, or --worker")
    rerank = True if via_worker else rerank
    # Named on purpose, a missing checkpoint must not fall back to BM25 quietly; a worker checks its own.
    missing = [] if via_worker else [str(path) for path in settings.checkpoint if not path.is_file()]
    if missing and rerank is not False:
        raise click.ClickException(
            f"ESRR_CHECKPOINT names {', '.join(missing)}, which does not exist; fix the "
            "path, or unset it to serve <home>/models (`esrr search --no-rerank` "
            "searches without the model)"
        )
    model_option = "--worker" if via_worker else "--rerank"
    for option, asked in ((model_option, rerank), ("--feedback", use_feedback), ("--neighbours", use_neighbours)):
        if asked and not window:
            raise click.UsageError(f"{option} reorders the top --window hits; give a window above 0")
    if use_feedback and settings.feedback_weight == 0:
        raise click.UsageError(
            "--feedback asks for candidate feedback, but ESRR_FEEDBACK_WEIGHT is 0; "
            "set it above 0, or unset it for the default"
        )
    untrained = rerank is None and window > 0 and not checkpoint.is_file()  # said once, below
    if rerank is None:
        rerank = checkpoint.is_file() and window > 0
    if use_feedback is None:
        use_feedback = settings.feedback_weight > 0 and window > 0
    if use_neighbours is None:
        use_neighbours = settings.neighbours_path.is_file() and window > 0
    neighbours = _load_neighbours(settings) if use_neighbours else None
    try:
        served = backend if backend is not None else open_backend(settings)
    except BackendError as error:
        raise click.ClickException(str(error)) from None
    reranker = None
    if via_worker:
        reranker = _worker_reranker(settings)
    elif rerank:
        if local_reranker is None:
            raise click.UsageError(
                "this command scores only through a worker; drop --rerank, or use "
                "`esrr search`, which can load the model itself"
            )
        reranker = local_reranker()
    elif untrained:  # asked for no model (--no-rerank, a window of 0): nothing to say
        click.echo(
            "(not reranked: "
            + missing_from_home(
                f"no model at {checkpoint.absolute()}",
                "train the embeddings and the model with `bash scripts/run.sh "
                "--train`, or `esrr embeddings train` then `esrr train`",
            )
            + ")",
            err=True,
        )
    guard = settings.bm25_guard_weight if reranker is not None else 0.0
    if not use_feedback:
        return SearchPipeline(
            served, window, reranker, None, neighbours, guard_weight=guard, refine_while_skipped=settings.breaker_refine
        )
    from es_rerank.ranking.feedback import DocumentVectorCache, FeedbackParams  # scipy: only where feedback runs

    cache = (
        DocumentVectorCache(settings.feedback_cache_documents)
        if keep_vectors and settings.feedback_cache_documents
        else None
    )
    return SearchPipeline(
        served,
        window,
        reranker,
        FeedbackParams.from_settings(settings),
        neighbours,
        cache,
        guard,
        settings.breaker_refine,
    )


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
    """The judged-neighbours file of ``settings``, or a CLI error naming the fix."""
    from es_rerank.ranking.neighbours import JudgedNeighbours, NeighboursError

    try:
        return JudgedNeighbours.load(settings.neighbours_path)
    except NeighboursError as error:
        raise click.ClickException(str(error)) from None
