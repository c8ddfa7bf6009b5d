"""Settings of a scoring worker process, from ``ESRR_*`` environment variables.

Validated when the worker starts: a bad value stops it with the variable named
and the fix (``es_rerank.settings.settings_problems``), never echoing the value.
The broker, queue, checkpoint and Lex features, which a caller must agree on with
the worker, are ``es_rerank.settings.BrokerSettings``; this adds what only a worker reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from es_rerank.settings import BrokerSettings, not_empty_path


class WorkerSettings(BrokerSettings):
    """Artifacts, device, pool and micro-batching of one worker process (plus the broker's settings)."""

    embeddings: Path | None = Field(
        None,
        description="embeddings artifact directory; default: <home>/embeddings/<the checkpoint's "
        "embeddings_version>, or <home>/embeddings itself when it holds vectors.npy",
    )
    device: str | None = Field(
        None, pattern=r"^(cpu|cuda(:\d+)?)$", description="cpu, cuda, cuda:N; default: cuda when available"
    )

    torch_threads: int | None = Field(
        None,
        ge=1,
        le=256,
        description="CPU threads of the scorer; default torch's (all cores). On 2 cores two threads "
        "score 1.6x faster than one on a dedicated machine, but collapse (~40x slower) when "
        "another busy process shares the cores: set 1 where the worker shares its machine",
    )

    pool: str = Field(
        "threads",
        pattern="^(threads|solo|prefork)$",
        description="threads: tasks overlap in one process and share one model, so "
        "concurrent requests can be batched together (see worker.batching)",
    )
    concurrency: int = Field(8, ge=1, le=256, description="tasks in flight per worker process")
    batch_wait_ms: float = Field(2.0, ge=0, le=50, description="longest wait for company in a batch")
    batch_max_requests: int = Field(8, ge=1, le=256)
    batch_max_docs: int = Field(4000, ge=1, description="documents per forward pass (memory bound)")
    stats_cache_size: int = Field(4, ge=1, le=64, description="statistics versions kept loaded")

    soft_time_limit_s: float = Field(20.0, gt=0, description="prefork pool only: Celery's soft time limit")
    time_limit_s: float = Field(
        30.0, gt=0, description="prefork: Celery's time limit; threads and solo: the longest a task waits for its batch"
    )
    visibility_timeout_s: float = Field(
        300.0, gt=0, description="Redis: an unacknowledged task is redelivered after this long"
    )
    restore_interval_s: float = Field(10.0, gt=0, description="Redis: how often a worker looks for tasks to redeliver")
    poison_kept: int = Field(
        100,
        ge=0,
        le=10_000,
        description="Redis: messages on the queue that are not tasks are dropped and the last "
        "this many kept in the list esrr.poison (64 KiB each at most; 0: none)",
    )
    score_delay_ms: float = Field(0.0, ge=0, description="TESTING ONLY: sleep in every task")
    loglevel: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$")

    @field_validator("embeddings", mode="before")
    @classmethod
    def _embeddings_not_empty(cls, value: Any) -> Any:
        return not_empty_path(value, "<home>/embeddings/<the checkpoint's embeddings_version>")

    @field_validator("loglevel", "pool", mode="before")
    @classmethod
    def _case_insensitive(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        return value.upper() if info.field_name == "loglevel" else value.lower()

    @model_validator(mode="after")
    def _check_limits(self) -> WorkerSettings:
        if self.soft_time_limit_s >= self.time_limit_s:
            raise ValueError(
                f"ESRR_SOFT_TIME_LIMIT_S ({self.soft_time_limit_s}) must be below "
                f"ESRR_TIME_LIMIT_S ({self.time_limit_s})"
            )
        if self.is_redis and self.visibility_timeout_s <= self.time_limit_s:
            raise ValueError(
                f"ESRR_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s}) must exceed ESRR_TIME_LIMIT_S "
                f"({self.time_limit_s}), or Redis hands a running task to a second worker"
            )
        return self
