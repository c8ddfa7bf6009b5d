"""Settings of event logging (``ESRR_EVENTS*``) and of the interleaving experiment (``ESRR_EXPERIMENT``), read by
the gateway that records events and the commands that read them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import Field, field_validator

from es_rerank.learning.store import EventStoreError, is_postgres, sqlite_path
from es_rerank.ranking.experiment import ExperimentError, parse_experiment
from es_rerank.settings import CommonSettings

EVENTS_FILE = Path("events") / "events.sqlite3"
DAY_MS = 86_400_000


class EventSettings(CommonSettings):
    """Whether searches' impressions and clicks are recorded, where, for how long, and the bounds on a flood."""

    events: bool = Field(
        True,
        description="record the impressions and clicks the site page (or an API client) "
        "reports to POST /_esrr/events; false: that route answers 404 and the "
        "page reports nothing",
    )
    events_url: str = Field(
        "",
        description="the event store: a path or sqlite:/// URL (SQLite in WAL mode), or a "
        "postgresql:// URL for gateways on several machines; "
        f"default <home>/{EVENTS_FILE.as_posix()}",
    )
    events_retention_days: float = Field(
        90.0,
        ge=0,
        le=36_500,
        description="events older than this are deleted (checked once an hour by the writer); 0 keeps them forever",
    )
    events_queue: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="events waiting in memory for the writer, "
        "per gateway process; more are dropped and counted (esrr_events_dropped_total)",
    )
    events_max_per_request: int = Field(
        50, ge=1, le=1000, description="most events one POST /_esrr/events may carry; more is a 400 naming the limit"
    )
    events_max_body_bytes: int = Field(
        64 << 10,
        ge=1 << 10,
        le=1 << 20,
        description="largest body of one POST /_esrr/events; larger is a 413 naming the limit",
    )

    @field_validator("events_url")
    @classmethod
    def _a_store_this_version_opens(cls, url: str) -> str:
        if url.strip() and is_postgres(url.strip()):
            if importlib.util.find_spec("psycopg") is None:
                raise ValueError("names PostgreSQL, and psycopg is not installed: pip install 'es-rerank[postgres]'")
        elif url.strip():
            try:
                sqlite_path(url.strip())
            except EventStoreError as error:
                raise ValueError(str(error)) from None
        return url.strip()

    @property
    def events_store_url(self) -> str:
        """The event store's path or URL, the default filled in."""
        return self.events_url or str(self.home / EVENTS_FILE)

    @property
    def events_retention_ms(self) -> int | None:
        """The retention in milliseconds, None to keep events forever."""
        return int(self.events_retention_days * DAY_MS) if self.events_retention_days else None


class ExperimentSettings(EventSettings):
    """The candidate ranker the gateway interleaves with the served one (``es_rerank/gateway/experiment.py``), whose
    impressions ``esrr experiment report`` reads."""

    experiment: str = Field(
        "",
        description="a candidate ranker interleaved with the served one on first pages: "
        "bm25 (BM25's order), or votes:/path/to/judged-neighbours.json (the served pipeline "
        "with those votes); empty: none",
    )

    # Exploration (es_rerank/ranking/exploration.py): clicks can judge only what is shown.
    explore: float = Field(
        0.0,
        ge=0,
        le=1,
        description="share of scored first pages whose last ESRR_EXPLORE_SLOTS places show documents drawn at "
        "random from the served ranking's places below the page down to ESRR_EXPLORE_DEPTH, so that clicks reach "
        "documents it does not yet show; 0: none (not with ESRR_EXPERIMENT, whose pages are interleaved instead)",
    )
    explore_slots: int = Field(
        3, ge=1, le=10, description="places at the bottom of an exploring first page that show drawn documents"
    )
    explore_depth: int = Field(
        30,
        ge=2,
        le=500,
        description="an exploring page draws from the served ranking's places below the page down to this one",
    )

    @field_validator("experiment")
    @classmethod
    def _an_experiment_this_gateway_runs(cls, value: str) -> str:
        try:
            parse_experiment(value)
        except ExperimentError as error:
            raise ValueError(str(error)) from None
        return value.strip()
