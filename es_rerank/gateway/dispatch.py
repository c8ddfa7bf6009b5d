"""The model's scores from a running worker: one ``rerank.score`` task per query, sent by name.

A ``pipeline.Reranker`` for a process that does not hold the model: it builds the
request here (Lex features, first tokens; ``es_rerank.payload``), sends it through the
broker to the task named ``TASK_NAME`` and waits for the scores. Torch-free, and it
never imports the worker's code: the Celery app it sends with is configuration only.

Deadline: the task is sent with ``expires`` = the deadline, so a worker that reaches it
late drops it instead of scoring for nobody, and the caller waits no longer than that.
No answer in time, or no broker, raises ``ScoringUnavailable``: the pipeline keeps
BM25's order for that query and says why. A worker that refuses the request
(``PayloadError``, ``WorkerSetupError``) would refuse every query the same way, so that
passes through with its fix.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from celery.exceptions import TimeoutError as CeleryTimeoutError
from kombu.exceptions import OperationalError
from kombu.utils.url import maybe_sanitize_url

from es_rerank.backends.base import Hit
from es_rerank.gateway.pipeline import ScoringUnavailable, StageClock, no_clock
from es_rerank.lex import LEX3
from es_rerank.payload import TASK_NAME, build_request, encode, result_scores
from es_rerank.stats import CorpusStats

UNANSWERED_NAME = "worker"  # the ranker's name until a worker has said which model it serves
# The caller's result backend gives up on a lost Redis within about a second.
CALLER_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}


class WorkerReranker:
    """Scores from whichever worker consumes ``queue``, each query within ``deadline_s`` (a ``pipeline.Reranker``).

    ``client`` is a Celery app with the workers' broker and result backend
    (``worker.celery_app.create_app``), not yet used: it only sends, and its result
    backend gets ``CALLER_RETRY_POLICY``, as Celery's default reconnects (20 tries, a
    second apart) would outlast any deadline.
    """

    def __init__(self, client: Any, queue: str, deadline_s: float, lex_names: Sequence[str] = LEX3) -> None:
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be above 0, got {deadline_s}")
        client.conf.result_backend_transport_options = {**(client.conf.result_backend_transport_options or {}),
                                                        "retry_policy": CALLER_RETRY_POLICY}
        self.client = client
        self.queue = queue
        self.deadline_s = deadline_s
        self.lex_names = tuple(lex_names)
        self.name = UNANSWERED_NAME

    def __call__(self, query: str, hits: Sequence[Hit], stats: CorpusStats,
                 clock: StageClock = no_clock) -> np.ndarray:
        """float32 [len(hits)] scores from a worker; ``ScoringUnavailable`` when none answers in time."""
        with clock("features"):
            payload = encode(build_request(query, [h.terms for h in hits], stats, self.lex_names))
        with clock("model"):
            result = self._answer(payload)
        scores = result_scores(result, len(hits))
        self.name = str(result.get("model") or UNANSWERED_NAME)
        return scores

    def _answer(self, payload: dict[str, Any]) -> Any:
        """The task's result, within the deadline."""
        broker = maybe_sanitize_url(self.client.conf.broker_url)
        try:
            # retry=False: a broker that is down fails now, not after the publish retries outlast the deadline
            pending = self.client.send_task(TASK_NAME, args=[payload], queue=self.queue,
                                            expires=self.deadline_s, retry=False)
        except (OperationalError, RuntimeError) as error:  # RuntimeError: Celery's result backend gave up
            cause = f" ({error})" if isinstance(error, OperationalError) else ""
            raise ScoringUnavailable(f"cannot reach the broker or its result backend at {broker}{cause}; check "
                                     "ESRR_BROKER_URL (and ESRR_RESULT_BACKEND) and that they run") from None
        try:
            return pending.get(timeout=self.deadline_s)
        except CeleryTimeoutError:
            self._forget(pending)
            raise ScoringUnavailable(f"no worker answered on queue {self.queue!r} at {broker} within "
                                     f"{self.deadline_s:g} s; start one with `esrr worker start`, or raise "
                                     "ESRR_SCORE_DEADLINE_S") from None
        except (OperationalError, RuntimeError):
            self._forget(pending)
            raise ScoringUnavailable(f"lost the result backend of {broker} while waiting for the scores; check "
                                     "that it runs") from None

    def _forget(self, pending: Any) -> None:
        """Stop tracking an unanswered task (left to ``AsyncResult.__del__``, exit prints a traceback)."""
        self.client.backend.remove_pending_result(pending)

    def close(self) -> None:
        """Close the app's connections to the broker and the result backend."""
        self.client.close()

    def __enter__(self) -> "WorkerReranker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
