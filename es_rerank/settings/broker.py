"""``BrokerSettings``: what a caller and a worker must agree on (the broker, the queue, the served model)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from es_rerank.lex import LEX3, check_feature_names
from es_rerank.payload import DEFAULT_QUEUE
from es_rerank.settings.checkpoints import (
    DEFAULT_CHECKPOINT_NAME,
    WINDOW_CHECKPOINT_NAME,
    checkpoint_lex_features,
    checkpoint_list,
)
from es_rerank.settings.checks import check_redis_url, require_port_number
from es_rerank.settings.common import CommonSettings

REDIS_SCHEMES = ("redis", "rediss", "redis+socket")
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
RESULT_ONLY_SCHEMES = ("rpc",)


class BrokerSettings(CommonSettings):
    """What a caller and a worker must agree on: the broker, the queue, the served model and its Lex features.

    The gateway and ``esrr search --worker`` read these to send a task; a worker
    (``worker.settings.WorkerSettings``) adds its own. Torch-free.
    """

    broker_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis (redis://) or RabbitMQ (amqp://guest:guest@host:5672//)"
    )
    result_backend: str | None = Field(
        None, description="default: the Redis broker itself, or rpc:// with an AMQP broker"
    )
    queue: str = Field(DEFAULT_QUEUE, min_length=1, description="queue the worker consumes")

    checkpoint: Annotated[tuple[Path, ...], NoDecode] = Field(
        (),
        description=f"the served .pt file; default: <home>/models/{WINDOW_CHECKPOINT_NAME} when trained, else "
        f"<home>/models/{DEFAULT_CHECKPOINT_NAME}. Several, "
        "comma-separated, are served as one ensemble (worker.ensemble): the mean of their "
        "scores, each standardised within the request",
    )
    score_deadline_s: float = Field(
        2.0,
        gt=0,
        le=600,
        description="caller side (`esrr search --worker`): longest wait for a worker's "
        "scores; the task expires then, and the query keeps BM25's order. "
        "Celery checks for the answer once a second, so a wait past it ends "
        "at the next whole second",
    )
    # Caller side, during an outage (es_rerank/ranking/breaker.py, dispatch.py; docs/operations.md).
    breaker_failures: int = Field(
        3,
        ge=1,
        le=1000,
        description="searches in a row without a worker answer "
        "after which the gateway stops asking the workers for a cool-down",
    )
    breaker_cooldown_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="how long searches then skip the workers (BM25 order at once) before one search probes them again",
    )
    breaker_refine: bool = Field(
        True,
        description="while the breaker skips the workers, refine BM25's window "
        "with the candidate feedback and votes (true), or answer BM25's page alone "
        "(false: the cheapest fallback, in BM25's order)",
    )
    queue_max_tasks: int = Field(
        5,
        ge=1,
        le=100_000,
        description="Redis: tasks left waiting on the queue "
        "above which a search sends none and falls back; bounds what an outage leaves "
        "on the broker (5 x at most 190 KB for a window of 500)",
    )
    lex_features: Annotated[tuple[str, ...], NoDecode] = Field(
        LEX3,
        description="caller side: the Lex features the served model reads, comma-separated; default: "
        "those the record beside the served checkpoint names (`esrr train` writes it), else "
        "Lex3 (on the window scale for the window variant)",
    )
    broker_key_prefix: str = Field("", description="Redis key prefix, to share a Redis database")

    result_expires_s: int = Field(600, ge=1, description="results are read at once; keep Redis clean")

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
        """The served checkpoint (ESRR_CHECKPOINT; default the window variant once trained, else the paper's), or the
        members of the served ensemble."""
        if self.checkpoint:
            return self.checkpoint
        window = self.models_dir / WINDOW_CHECKPOINT_NAME
        return (window if window.is_file() else self.models_dir / DEFAULT_CHECKPOINT_NAME,)

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

    @property
    def result_backend_url(self) -> str:
        """Where results go: both choices push results to the waiting client (no polling)."""
        if self.result_backend:
            return self.result_backend
        return self.broker_url if self.is_redis else "rpc://"

    def _check_result_backend(self, url: str) -> None:
        """A result backend this package can talk to (the URL is not echoed: it may carry a password)."""
        scheme = urlsplit(url).scheme
        if scheme not in REDIS_SCHEMES + RESULT_ONLY_SCHEMES:
            raise ValueError(
                f"ESRR_RESULT_BACKEND has scheme {scheme!r}: use redis://HOST:6379/DB, rpc:// "
                "with an AMQP broker, or leave it unset"
            )
        require_port_number("ESRR_RESULT_BACKEND", url, "redis://HOST:6379/1")
        check_redis_url("ESRR_RESULT_BACKEND", url)
        if scheme in RESULT_ONLY_SCHEMES and self.is_redis:
            raise ValueError(
                "ESRR_RESULT_BACKEND=rpc:// needs an AMQP broker; leave it unset to use "
                "the Redis broker as result backend"
            )

    @model_validator(mode="after")
    def _check_broker(self) -> BrokerSettings:
        if self.broker_scheme not in REDIS_SCHEMES + AMQP_SCHEMES:
            # The URL itself is not echoed: it may carry a password.
            raise ValueError(
                f"ESRR_BROKER_URL has scheme {self.broker_scheme!r}: use redis://HOST:6379/DB or "
                "amqp://USER:PASSWORD@HOST:5672//"
            )
        require_port_number("ESRR_BROKER_URL", self.broker_url, "redis://HOST:6379/0")
        check_redis_url("ESRR_BROKER_URL", self.broker_url)
        for path in self.checkpoint:
            if path.is_dir():
                raise ValueError(
                    f"ESRR_CHECKPOINT names {str(path)!r}, a directory; point it to the .pt "
                    "file `esrr train` wrote (several: comma-separated), or leave it unset "
                    "for <home>/models"
                )
        if self.result_backend:
            self._check_result_backend(self.result_backend)
        if "lex_features" not in self.model_fields_set:  # what the served model reads, not what a variable says
            self.lex_features = checkpoint_lex_features(self.checkpoint_path)
        return self
