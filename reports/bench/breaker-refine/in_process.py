"""What one search the open breaker skips costs the gateway itself, in-process (no HTTP, no load generator).

The real app through Flask's test client over the embedded index of ESRR_HOME, with
ESRR_BREAKER_REFINE=false's pipeline and a reranker whose breaker is open; the 324 NFCorpus
dev queries as `GET /_search?q=`, once untimed, then three timed passes. Prints the p50 of
each pass and their median. Run with the repository's .venv and ESRR_HOME set:
python reports/bench/breaker-refine/in_process.py
"""

from __future__ import annotations

import logging
import statistics
import time
from urllib.parse import urlencode

from benchmarks.queries import dev_query_texts
from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.gateway.app import create_app
from es_rerank.gateway.config import GatewaySettings
from es_rerank.machine import machine_description
from es_rerank.ranking.pipeline import ScoringUnavailable, SearchPipeline
from es_rerank.ranking.served import ServedSearch


class OpenBreaker:
    """A reranker whose breaker skips the workers."""

    name = "delta-32-lex3"

    def skipping(self) -> str:
        return "the model stage is skipped for 3.0 s more"

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise ScoringUnavailable(self.skipping())

    def close(self) -> None:
        pass


settings = GatewaySettings()
logging.disable(logging.WARNING)  # the fallback's JSON line per search: the gateway's log, timed with HTTP under load
backend = EmbeddedBackend.open_current(settings.indexes_dir / "embedded")
pipeline = SearchPipeline(backend, settings.gateway_window, OpenBreaker(), refine_while_skipped=False)
client = create_app(ServedSearch(pipeline, 3600), settings).test_client()
paths = ["/_search?" + urlencode({"q": text, "size": 10}) for text in dev_query_texts(None, settings, 324)]
for path in paths:
    assert client.get(path).status_code == 200
p50s = []
for _ in range(3):
    times = []
    for path in paths:
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    p50s.append(statistics.median(times))
print(
    f"{machine_description()} | {len(paths)} dev queries, a search the open breaker skips, in-process: "
    f"p50 {statistics.median(p50s):.2f} ms (passes: {', '.join(f'{p:.2f}' for p in p50s)})"
)
