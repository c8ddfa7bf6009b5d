"""What the worker logs per task, and what Celery is asked to repr of a result for a line it does not log."""

from __future__ import annotations

import logging

import pytest

from worker import task_log
from worker.tasks import score


@pytest.fixture
def trace_level():
    """Sets the trace logger's level, the logger enabled: a ``logging.config.dictConfig`` run earlier in the process
    (another test's) disables the loggers it does not name."""
    logger = logging.getLogger(task_log.TRACE_LOGGER)
    level, disabled = logger.level, logger.disabled
    logger.disabled = False
    yield logger.setLevel
    logger.setLevel(level)
    logger.disabled = disabled


def test_result_repr_only_where_the_success_line_is_logged(trace_level) -> None:
    trace_level(logging.INFO)
    assert task_log.result_repr_size() == 0 == score.resultrepr_maxsize
    trace_level(logging.DEBUG)
    assert task_log.result_repr_size() == task_log.RESULT_REPR_CHARS == score.resultrepr_maxsize


def test_the_success_line_is_dropped_unless_debug(trace_level) -> None:
    record = logging.LogRecord(task_log.TRACE_LOGGER, logging.INFO, "", 0, "succeeded", None, None)
    record.data = {"name": score.name, "return_value": ", ..."}
    trace_level(logging.INFO)
    assert not task_log.ScoresOnlyAtDebug().filter(record)
    trace_level(logging.DEBUG)
    assert task_log.ScoresOnlyAtDebug().filter(record)
