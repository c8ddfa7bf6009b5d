"""Settings of a scoring worker process, from ``ESRR_*`` environment variables.

Validated when the worker starts: a bad value stops it with the variable named
and the fix (``es_rerank.settings.settings_problems``), never echoing the value.
``esrr search`` reads the checkpoint and device settings from here too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import NoDecode

from es_rerank.lex import LEX3, check_feature_names
from es_rerank.payload import DEFAULT_QUEUE
from es_rerank.settings import CommonSettings, not_empty_path

DEFAULT_CHECKPOINT_NAME = "delta-32-lex3.pt"
REDIS_SCHEMES = ("redis", "rediss", "redis+socket")
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
RESULT_ONLY_SCHEMES = ("rpc",)


def checkpoint_list(value: str) -> tuple[Path, ...]:
    """The checkpoints of a comma-separated list (an ensemble's members); ``ValueError`` names the problem."""
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ValueError(f"{value!r} has an empty entry; separate checkpoint files with single commas")
    paths = tuple(Path(part) for part in parts)
    if len({path.resolve() for path in paths}) < len(paths):
        raise ValueError(f"{value!r} names one checkpoint twice; an ensemble lists each member once")
    return paths


def _require_port_number(variable: str, url: str, example: str) -> None:
    """``ValueError`` naming ``variable`` when ``url``'s port is not a number in 1-65535 (the URL is not echoed)."""
    try:
        urlsplit(url).port
    except ValueError:  # its text holds the URL, which may carry a password
        raise ValueError(f"{variable}: the port must be a number in 1-65535, as in {example}") from None


SSL_CERT_REQS = ("required", "optional", "none", "CERT_REQUIRED", "CERT_OPTIONAL", "CERT_NONE")


def _check_redis_url(variable: str, url: str) -> None:
    """``ValueError`` naming ``variable`` for a Redis URL that would fail only when the first task is sent.

    The message never echoes the URL (it may carry a password). ``rediss://`` must say
    how to check the server's certificate: Celery's result backend refuses it without,
    and kombu, as broker, would fall back to no check at all.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return
    if not re.fullmatch(r"/?\d*", parts.path):
        raise ValueError(f"{variable}: a Redis URL ends in a database number, as in redis://HOST:6379/0")
    from redis.connection import parse_url

    try:
        parse_url(url)
    except ValueError as error:  # redis' text names the parameter or the part, not the URL
        raise ValueError(f"{variable}: {error} Fix the URL, as in redis://HOST:6379/0?socket_timeout=5") from None
    cert_reqs = parse_qs(parts.query).get("ssl_cert_reqs", [None])[-1]
    if parts.scheme == "rediss" and cert_reqs not in SSL_CERT_REQS:
        raise ValueError(f"{variable}: a rediss:// URL needs ssl_cert_reqs=required (or optional, or none), "
                         "as in rediss://HOST:6380/0?ssl_cert_reqs=required")


class WorkerSettings(CommonSettings):
    """Broker, artifacts, pool and micro-batching of one worker process."""

    broker_url: str = Field("redis://127.0.0.1:6379/0",
                            description="Redis (redis://) or RabbitMQ (amqp://guest:guest@host:5672//)")
    result_backend: str | None = Field(
        None, description="default: the Redis broker itself, or rpc:// with an AMQP broker")
    queue: str = Field(DEFAULT_QUEUE, min_length=1, description="queue the worker consumes")

    checkpoint: Annotated[tuple[Path, ...], NoDecode] = Field(
        (), description=f"the served .pt file; default: <home>/models/{DEFAULT_CHECKPOINT_NAME}. Several, "
                        "comma-separated, are served as one ensemble (worker.ensemble): the mean of their "
                        "scores, each standardised within the request")
    embeddings: Path | None = Field(
        None, description="embeddings artifact directory; default: <home>/embeddings/<the checkpoint's "
                          "embeddings_version>, or <home>/embeddings itself when it holds vectors.npy")
    device: str | None = Field(None, pattern=r"^(cpu|cuda(:\d+)?)$",
                               description="cpu, cuda, cuda:N; default: cuda when available")
    torch_threads: int | None = Field(
        None, ge=1, le=256,
        description="CPU threads of the scorer; default torch's (all cores). On 2 cores two threads "
                    "score 1.6x faster than one on a dedicated machine, but collapse (~40x slower) when "
                    "another busy process shares the cores: set 1 where the worker shares its machine")

    pool: str = Field("threads", pattern="^(threads|solo|prefork)$",
                      description="threads: tasks overlap in one process and share one model, so "
                                  "concurrent requests can be batched together (see worker.batching)")
    concurrency: int = Field(8, ge=1, le=256, description="tasks in flight per worker process")
    batch_wait_ms: float = Field(2.0, ge=0, le=50, description="longest wait for company in a batch")
    batch_max_requests: int = Field(8, ge=1, le=256)
    batch_max_docs: int = Field(4000, ge=1, description="documents per forward pass (memory bound)")
    stats_cache_size: int = Field(4, ge=1, le=64, description="statistics versions kept loaded")

    soft_time_limit_s: float = Field(20.0, gt=0, description="prefork pool only: Celery's soft time limit")
    time_limit_s: float = Field(30.0, gt=0, description="prefork: Celery's time limit; threads and solo: "
                                                        "the longest a task waits for its batch")
    visibility_timeout_s: float = Field(
        300.0, gt=0, description="Redis: an unacknowledged task is redelivered after this long")
    restore_interval_s: float = Field(
        10.0, gt=0, description="Redis: how often a worker looks for tasks to redeliver")
    result_expires_s: int = Field(600, ge=1, description="results are read at once; keep Redis clean")
    broker_key_prefix: str = Field("", description="Redis key prefix, to share a Redis database")

    score_deadline_s: float = Field(
        2.0, gt=0, le=600, description="caller side (`esrr search --worker`): longest wait for a worker's "
                                       "scores; the task expires then, and the query keeps BM25's order. "
                                       "Celery checks for the answer once a second, so a wait past it ends "
                                       "at the next whole second")
    lex_features: Annotated[tuple[str, ...], NoDecode] = Field(
        LEX3, description="caller side: the Lex features the served model reads, comma-separated (a model "
                          "trained with `esrr train --lex-features` needs its list here); default Lex3")
    score_delay_ms: float = Field(0.0, ge=0, description="TESTING ONLY: sleep in every task")
    loglevel: str = Field("INFO", pattern="^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$")

    @property
    def broker_scheme(self) -> str:
        """The broker URL's scheme (redis, amqp, ...)."""
        return urlsplit(self.broker_url).scheme

    @property
    def is_redis(self) -> bool:
        """Whether the broker is Redis (redelivery by visibility timeout)."""
        return self.broker_scheme in REDIS_SCHEMES

    @property
    def checkpoint_paths(self) -> tuple[Path, ...]:
        """The served checkpoint, or the members of the served ensemble."""
        return self.checkpoint or (self.models_dir / DEFAULT_CHECKPOINT_NAME,)

    @property
    def checkpoint_path(self) -> Path:
        """The served checkpoint (an ensemble's first member)."""
        return self.checkpoint_paths[0]

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _split_checkpoints(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        if isinstance(value, (str, Path)):
            return checkpoint_list(str(value)) if str(value).strip() else ()
        return value

    @field_validator("lex_features", mode="before")
    @classmethod
    def _split_lex_features(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        return check_feature_names(list(value))

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

    @property
    def result_backend_url(self) -> str:
        """Where results go: both choices push results to the waiting client (no polling)."""
        if self.result_backend:
            return self.result_backend
        return self.broker_url if self.is_redis else "rpc://"

    def _check_result_backend(self) -> None:
        """A result backend this package can talk to (the URL is not echoed: it may carry a password)."""
        scheme = urlsplit(self.result_backend).scheme
        if scheme not in REDIS_SCHEMES + RESULT_ONLY_SCHEMES:
            raise ValueError(f"ESRR_RESULT_BACKEND has scheme {scheme!r}: use redis://HOST:6379/DB, rpc:// "
                             "with an AMQP broker, or leave it unset")
        _require_port_number("ESRR_RESULT_BACKEND", self.result_backend, "redis://HOST:6379/1")
        _check_redis_url("ESRR_RESULT_BACKEND", self.result_backend)
        if scheme in RESULT_ONLY_SCHEMES and self.is_redis:
            raise ValueError("ESRR_RESULT_BACKEND=rpc:// needs an AMQP broker; leave it unset to use "
                             "the Redis broker as result backend")

    @model_validator(mode="after")
    def _check(self) -> "WorkerSettings":
        if self.broker_scheme not in REDIS_SCHEMES + AMQP_SCHEMES:
            # The URL itself is not echoed: it may carry a password.
            raise ValueError(f"ESRR_BROKER_URL has scheme {self.broker_scheme!r}: use redis://HOST:6379/DB or "
                             "amqp://USER:PASSWORD@HOST:5672//")
        _require_port_number("ESRR_BROKER_URL", self.broker_url, "redis://HOST:6379/0")
        _check_redis_url("ESRR_BROKER_URL", self.broker_url)
        for path in self.checkpoint:
            if path.is_dir():
                raise ValueError(f"ESRR_CHECKPOINT names {str(path)!r}, a directory; point it to the .pt "
                                 "file `esrr train` wrote (several: comma-separated), or leave it unset "
                                 "for <home>/models")
        if self.soft_time_limit_s >= self.time_limit_s:
            raise ValueError(f"ESRR_SOFT_TIME_LIMIT_S ({self.soft_time_limit_s}) must be below "
                             f"ESRR_TIME_LIMIT_S ({self.time_limit_s})")
        if self.is_redis and self.visibility_timeout_s <= self.time_limit_s:
            raise ValueError(
                f"ESRR_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s}) must exceed ESRR_TIME_LIMIT_S "
                f"({self.time_limit_s}), or Redis hands a running task to a second worker")
        if self.result_backend:
            self._check_result_backend()
        return self
