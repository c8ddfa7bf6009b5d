"""What the worker logs per scoring task: a one-line summary at INFO, the scores only at DEBUG.

Celery logs every task's return value at INFO ("Task ... succeeded in 0.02s: {...}"),
here a list of hundreds of scores per search: megabytes of log an hour that nobody
reads. ``ScoresOnlyAtDebug`` drops that line for ``rerank.score`` unless the trace
logger is at DEBUG; the task logs ``summary`` instead.
"""

from __future__ import annotations

import logging
from typing import Any

from es_rerank.payload import TASK_NAME

TRACE_LOGGER = "celery.app.trace"  # where Celery logs a task's outcome


class ScoresOnlyAtDebug(logging.Filter):
    """Drops Celery's success line of ``rerank.score`` (it holds every score) unless its logger is at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)
        if not (isinstance(data, dict) and data.get("name") == TASK_NAME and "return_value" in data):
            return True
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


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
