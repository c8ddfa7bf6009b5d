"""The scoring task, ``rerank.score``: decode the payload, score it, return the scores.

Thin on purpose: the work is in ``es_rerank.payload.decode`` and
``worker.runtime.Runtime.score``, which tests call directly.

Errors: a malformed payload raises ``PayloadError``, a worker that cannot score
(missing statistics version, model, embeddings) ``WorkerSetupError``. Both come
from ``es_rerank.payload`` (torch-free), so ``AsyncResult.get()`` in the gateway
re-raises them as those classes, with the message that says what to fix. They
are not retried (retrying cannot help) and, with ``task_acks_on_failure_or_timeout``,
acknowledged: the worker answers once and stays up. Raising rather than returning
an error value keeps one path for every failure in the gateway (catch, fall back
to the BM25 order) and shows failures as FAILURE in Celery's monitoring.

Result: ``{"v": 1, "scores": [float, ...], "model": name, "took_ms": float, "batch": int}``,
``scores[i]`` for the i-th document of the request; ``batch`` is the number of
requests that shared its forward pass (for monitoring the micro-batching).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import Task, signals

from es_rerank.payload import RESULT_VERSION, TASK_NAME, PayloadError, decode
from worker import task_log
from worker.batching import result_or_cancel
from worker.celery_app import WorkerApp, app
from worker.runtime import Runtime, close_runtime, get_runtime
from worker.settings import WorkerSettings

log = logging.getLogger(__name__)
task_log.install()


class ScoringTask(Task):
    """A task with the process's runtime as a lazy property (celery ``tasks.rst``, Instantiation)."""

    @property
    def settings(self) -> WorkerSettings:
        """The worker's validated settings."""
        if not isinstance(self.app, WorkerApp):
            raise TypeError(f"{type(self).__name__} runs in the app of worker.celery_app.create_app")
        return self.app.esrr_settings

    @property
    def resultrepr_maxsize(self) -> int:  # type: ignore[override]  # a class attribute in Celery
        """How much of the result Celery's tracer reprs for its success line: nothing unless that is logged."""
        return task_log.result_repr_size()

    @property
    def runtime(self) -> Runtime:
        """This process's runtime, loaded on first use."""
        return get_runtime(self.settings)


# throws: a refused payload is logged as one line ("raised expected"), not with a traceback each time.
@app.task(bind=True, base=ScoringTask, name=TASK_NAME, max_retries=0, throws=(PayloadError,))
def score(self: ScoringTask, payload: dict[str, Any]) -> dict[str, Any]:
    """Scores of the payload's documents for its query."""
    start = time.perf_counter()
    request = decode(payload)
    if self.settings.score_delay_ms:  # testing only: keeps a task running long enough to kill
        time.sleep(self.settings.score_delay_ms / 1000)
    runtime = self.runtime
    future = runtime.submit(request)
    scores = result_or_cancel(future, self.settings.time_limit_s)  # the threads pool has no time limit
    result = {
        "v": RESULT_VERSION,
        "scores": scores.tolist(),
        "model": runtime.model_name,
        "took_ms": round((time.perf_counter() - start) * 1000, 3),
        "batch": future.batch_size,
    }
    log.info(task_log.summary(self.request.id, result))
    return result


def _pool_name(pool_cls: Any) -> str:
    return pool_cls if isinstance(pool_cls, str) else getattr(pool_cls, "__module__", str(pool_cls))


@signals.celeryd_after_setup.connect
def _preload(sender: Any = None, instance: Any = None, **_: Any) -> None:
    """Load the model before taking tasks, and refuse to start when it cannot be loaded.

    Only with the threads or solo pool: they score in this very process. With
    prefork each child loads on its first task (after the fork, CUDA-safe).
    """
    if instance is None or getattr(instance.app, "esrr_settings", None) is None:
        return
    pool = _pool_name(getattr(instance, "pool_cls", ""))
    if "prefork" in pool or "processes" in pool:
        return
    try:
        get_runtime(instance.app.esrr_settings)  # logs where model, embeddings, statistics come from
    except Exception as error:
        raise SystemExit(f"esrr worker cannot start: {error}") from error


@signals.worker_shutdown.connect
def _shutdown(**_: Any) -> None:
    close_runtime()
