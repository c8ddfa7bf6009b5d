"""What the worker logs per scoring task: a one-line summary at INFO, the scores only at DEBUG.

Celery logs every task's return value at INFO ("Task ... succeeded in 0.02s: {...}"),
here a list of hundreds of scores per search: megabytes of log an hour that nobody
reads. ``ScoresOnlyAtDebug`` drops that line for ``rerank.score`` unless the trace
logger is at DEBUG; the task logs ``summary`` instead.

Celery makes that line's repr of the result (``saferepr``, up to ``Task.resultrepr_maxsize``
characters) for every task, logged or not: 0.35 ms of the worker's CPU a task for 500 scores
(reports/profile/README.md, "The worker's CPU per task"). ``result_repr_size`` gives it room only
where the line is logged.
"""

from __future__ import annotations

import logging
from typing import Any

from es_rerank.payload import TASK_NAME

TRACE_LOGGER = "celery.app.trace"  # where Celery logs a task's outcome
RESULT_REPR_CHARS = 1024  # Celery's default resultrepr_maxsize


class ScoresOnlyAtDebug(logging.Filter):
    """Drops Celery's success line of ``rerank.score`` (it holds every score) unless its logger is at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if not (isinstance(data, dict) and data.get("name") == TASK_NAME and "return_value" in data):
            return True
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def result_repr_size() -> int:
    """Characters of Celery's repr of a scoring result: its default where the success line is logged (DEBUG), else 0
    (a repr of 0 characters costs nothing; the line it was for is dropped)."""
    return RESULT_REPR_CHARS if logging.getLogger(TRACE_LOGGER).isEnabledFor(logging.DEBUG) else 0


def install() -> None:
    """Put the filter on Celery's trace logger (once per process)."""
    trace = logging.getLogger(TRACE_LOGGER)
    if not any(isinstance(existing, ScoresOnlyAtDebug) for existing in trace.filters):
        trace.addFilter(ScoresOnlyAtDebug())


def summary(task_id: Any, result: dict[str, Any]) -> str:
    """One line for the log: how many documents, which model, how long, how many requests shared the batch."""
    return (
        f"{TASK_NAME}[{task_id}] scored {len(result['scores'])} documents with {result['model']} in "
        f"{result['took_ms']:.1f} ms (batch of {result['batch']})"
    )
