"""Settings of the HTTP gateway process (``esrr serve``), from ``ESRR_*`` environment variables.

The broker, queue, checkpoint and scoring deadline are ``BrokerSettings``, which the workers
read from the same variables, so a gateway and its workers cannot disagree.
"""

from __future__ import annotations

from pydantic import Field

from es_rerank.backends.base import MAX_WINDOW
from es_rerank.backends.query_tree import DEFAULT_LIMITS, QueryLimits
from es_rerank.learning.settings import ExperimentSettings
from es_rerank.settings import MAX_GATEWAY_THREADS, BrokerSettings


class GatewaySettings(BrokerSettings, ExperimentSettings):
    """Where the gateway listens, how deep it reranks, how often it looks for a new index version, whether it
    records the events its site reports and which candidate it interleaves (``ExperimentSettings``)."""

    gateway_host: str = Field("127.0.0.1", min_length=1, description="address to listen on; 0.0.0.0 for all")
    gateway_port: int = Field(8000, ge=1, le=65535)
    gateway_threads: int = Field(8, ge=1, le=MAX_GATEWAY_THREADS, description="requests served at once, per process")
    gateway_processes: int = Field(1, ge=1, le=64, description="gateway processes sharing the port (forked)")
    # Slow clients (es_rerank/gateway/server.py): a connection waiting on its client holds no thread.
    gateway_connection_limit: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="open client connections per process; the soft limit on open files is raised to fit",
    )
    gateway_channel_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="an idle client connection is closed after this long"
    )
    gateway_window: int = Field(500, ge=0, le=MAX_WINDOW, description="BM25 hits reranked per query (0: BM25 order)")
    gateway_site: bool = Field(
        True,
        description="serve the search page to browsers at / (es_rerank/gateway/site.py); "
        "false: / answers JSON to everyone",
    )
    gateway_rerank: bool = Field(
        True, description="have the workers score the window; false serves BM25 refined by the feedback and votes only"
    )
    # An admin's reindex swaps the served version (`esrr index build`/`use`); every request
    # after this many seconds follows it, so a gateway needs no restart.
    gateway_index_check_s: float = Field(
        5.0, ge=0, description="seconds between looks for a newly served index version (0: every request)"
    )
    # Bounds on one request, checked before any work that grows with it (docs/operations.md).
    gateway_max_url_bytes: int = Field(
        8192,
        ge=256,
        le=65536,
        description="longest path + query string read; "
        "longer is a 414 before routing (Elasticsearch's own limit is 4 KB)",
    )
    gateway_max_query_words: int = Field(
        256,
        ge=1,
        le=4096,
        description="most words in a query (and 32 characters a word); more is a 400 naming the limit",
    )
    gateway_max_mget_docs: int = Field(
        1000, ge=1, le=10_000, description="most documents one _mget reads; more is a 400 naming the limit"
    )
    gateway_max_msearch_searches: int = Field(
        20,
        ge=1,
        le=1000,
        description="most searches one _msearch runs (one after another); more is a 400 naming the limit",
    )
    # What one search's answer may cost (es_rerank/backends/answer_budget.py); docs/operations.md has the figures.
    gateway_max_answer_bytes: int = Field(
        8 << 20,
        ge=64 << 10,
        le=1 << 30,
        description="heaviest answer one "
        "search may render: over it (estimated before the search, or counted "
        "while the page is rendered) is a 400 naming the limit",
    )
    gateway_max_highlight_chars: int = Field(
        200_000,
        ge=1_000,
        le=1_000_000_000,
        description="most stored "
        "text one search's highlight may read: hits x each field's fragments "
        "(number_of_fragments x fragment_size, a whole field for 0); more is a "
        "400 naming the limit",
    )
    gateway_max_source_patterns: int = Field(
        256,
        ge=1,
        le=10_000,
        description="most _source include and exclude patterns one search may list; more is a 400 naming the limit",
    )
    # Heavy searches run few at a time (es_rerank/gateway/heavy_lane.py), so that light ones never wait behind them.
    gateway_heavy_slots: int = Field(
        1,
        ge=1,
        le=MAX_GATEWAY_THREADS,
        description="heavy searches (many hits, long highlights, sloppy phrases, wildcards) run at once per process",
    )
    gateway_heavy_queue: int = Field(
        2,
        ge=0,
        le=MAX_GATEWAY_THREADS,
        description="heavy searches that may wait for a slot per process (each holds a thread); more are a 429 at once",
    )
    gateway_heavy_wait_s: float = Field(
        10.0, gt=0, le=600, description="longest a heavy search waits for a slot before its 429"
    )
    # ... in processes of their own (es_rerank/gateway/heavy_process.py): their own interpreter lock, lower priority.
    gateway_heavy_process: bool = Field(
        True,
        description="run heavy searches in child processes, one per slot, "
        "started with `esrr serve`; false runs them in the gateway process",
    )
    gateway_heavy_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="longest a heavy search's process may "
        "take before it is killed (and started again) and the search is a 503",
    )
    gateway_heavy_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="niceness added to the heavy searches' processes, "
        "so the gateway's own (light searches) gets the CPU first",
    )
    # What one search may cost on the embedded index (QueryLimits); measured with `python -m benchmarks.query_cost`.
    gateway_max_query_terms: int = Field(
        DEFAULT_LIMITS.max_query_terms,
        ge=1,
        le=65_536,
        description="most words (and phrase words) one search looks up; more is a 400 naming the limit",
    )
    gateway_max_phrase_cost: int = Field(
        DEFAULT_LIMITS.max_phrase_cost,
        ge=0,
        le=100_000,
        description="most "
        "phrase words times slop (~N), summed over a search's phrases; a sloppy "
        "phrase costs CPU that grows faster than both",
    )
    gateway_max_wildcard_terms: int = Field(
        DEFAULT_LIMITS.max_wildcard_terms,
        ge=0,
        le=1024,
        description="most wildcard words (gree*, tumo?r) in one search",
    )
    gateway_max_wildcard_marks: int = Field(
        DEFAULT_LIMITS.max_wildcard_marks, ge=1, le=64, description="most ? and * in one wildcard word"
    )
    gateway_max_leading_wildcards: int = Field(
        DEFAULT_LIMITS.max_leading_wildcards,
        ge=0,
        le=1024,
        description="most wildcard words starting with ? or * in one search "
        "(each tries every word of the index; 0 refuses them)",
    )

    gateway_max_buckets: int = Field(
        DEFAULT_LIMITS.max_buckets,
        ge=1,
        le=1_000_000,
        description="most "
        "aggregation buckets one search may make (Elasticsearch's search.max_buckets); "
        "more is a 400 naming the limit, before any work",
    )

    @property
    def query_limits(self) -> QueryLimits:
        """The limits on one search's cost, as the embedded backend checks them."""
        return QueryLimits(
            self.gateway_max_query_terms,
            self.gateway_max_phrase_cost,
            self.gateway_max_wildcard_terms,
            self.gateway_max_wildcard_marks,
            self.gateway_max_leading_wildcards,
            self.gateway_max_buckets,
        )
