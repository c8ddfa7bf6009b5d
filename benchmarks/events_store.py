"""``esrr bench events``: what storing events costs: the event store's size and write time for N synthetic events.

Writes ``--events`` events (1 M by default) through ``learning.store.SqliteEventStore`` in
the recorder's batches, then reports the file's size (with its WAL folded in), the bytes
per event and the events written per second. The events are shaped like the site page's:
impressions of ten results at the positions of a page, NFCorpus query texts and document
ids, a ranker name as the gateway writes it, sessions of a few impressions each, and
``--clicks`` clicks per impression on average; deterministic from ``--seed``.

It also times the request side of recording, what ``POST /_esrr/events`` does before it
answers: decode one impression's JSON, validate it (``read_events``) and queue it
(``EventRecorder.record``), ``--requests`` times, with the writer thread storing them
meanwhile into a second store; the figures are the p50 and p99 of one call, in µs.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
from tqdm import tqdm

from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description

if TYPE_CHECKING:
    from es_rerank.learning.events import Received
    from es_rerank.learning.tables import TableStore

RANKER = "delta-32-lex3 + BM25 guard + candidate feedback + judged neighbours"  # as long as a served ranker's name
PAGE = 10
IMPRESSIONS_PER_SESSION = 4


def synthetic_events(
    count: int, clicks_per_impression: float, queries: list[str], doc_ids: list[str], seed: int
) -> Iterator[Received]:
    """``count`` events like the page's: an impression, then its clicks (Poisson-like, ``clicks_per_impression`` on
    average), sessions of a few impressions; ``learning.events.Received`` objects, time in ms increasing."""
    from es_rerank.learning.events import Click, Impression, Received, Shown

    rng = random.Random(seed)
    shown_per_page = min(PAGE, len(doc_ids))
    at_ms, made, session = 1_767_225_600_000, 0, ""
    while made < count:
        if made % IMPRESSIONS_PER_SESSION == 0 or not session:
            session = f"{rng.getrandbits(128):032x}"
        impression_id = f"{rng.getrandbits(64):016x}"
        first = PAGE * rng.choice((0, 0, 0, 1, 2)) + 1  # mostly the first page
        results = [
            Shown(id=doc, position=first + place) for place, doc in enumerate(rng.sample(doc_ids, shown_per_page))
        ]
        at_ms += rng.randint(1, 2000)
        yield Received(
            Impression(
                type="impression",
                impression_id=impression_id,
                session_id=session,
                query=rng.choice(queries),
                ranker=RANKER,
                results=results,
            ),
            at_ms,
        )
        made += 1
        clicks = int(clicks_per_impression) + (rng.random() < clicks_per_impression % 1)
        for shown in rng.sample(results, min(clicks, shown_per_page)):
            if made >= count:
                break
            at_ms += rng.randint(1, 5000)
            yield Received(
                Click(
                    type="click", impression_id=impression_id, session_id=session, id=shown.id, position=shown.position
                ),
                at_ms,
            )
            made += 1


@click.command(name="events")
@click.option(
    "--events", "count", default=1_000_000, show_default=True, type=click.IntRange(min=1), help="Events to write."
)
@click.option(
    "--clicks",
    "clicks_per_impression",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 10),
    help="Clicks per impression, on average (0: impressions only, the largest events).",
)
@click.option(
    "--requests",
    default=20_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Impressions timed through the request side (decode, validate, queue).",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the store (kept); default a temporary one, deleted after.",
)
@click.option(
    "--url",
    default=None,
    help="Measure this empty PostgreSQL database (postgresql://...) instead of "
    "a SQLite file; its tables' size with their indexes and TOAST is reported.",
)
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@json_out_option("Also write the figures as JSON.")
def bench_events(
    count: int,
    clicks_per_impression: float,
    requests: int,
    seed: int,
    out_dir: Path | None,
    url: str | None,
    data: Path | None,
    json_out: Path | None,
) -> None:
    """Size on disk and write time of N synthetic events in the event store (SQLite, or PostgreSQL with --url)."""
    from es_rerank.cli_options import load_settings
    from es_rerank.learning.recorder import BATCH
    from es_rerank.learning.store import EventStoreError, SqliteEventStore, open_store
    from es_rerank.settings import CommonSettings
    from index_setup.nfcorpus import NFCorpus

    try:
        corpus = NFCorpus.locate(data, load_settings(CommonSettings))
        queries = sorted(set(corpus.queries("train").values()))
        doc_ids = sorted(document.doc_id for document in corpus.documents())
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="esrr-events-") as scratch:
        path = (out_dir or Path(scratch)) / "events.sqlite3"
        if path.exists() and url is None:
            raise click.ClickException(f"{path} exists; give an empty --out folder")
        try:
            store = SqliteEventStore(path) if url is None else open_store(url)
        except EventStoreError as error:
            raise click.ClickException(str(error)) from None
        if any(store.counts().values()):
            raise click.ClickException("the database given with --url holds events already; give an empty one")
        events = synthetic_events(count, clicks_per_impression, queries, doc_ids, seed)
        written, writing_s, batch = 0, 0.0, []
        with tqdm(total=count, unit="event", desc="writing") as progress:
            for received in events:
                batch.append(received)
                if len(batch) == BATCH:
                    written, writing_s = written + len(batch), writing_s + _timed_write(store, batch)
                    progress.update(len(batch))
                    batch = []
            if batch:
                written, writing_s = written + len(batch), writing_s + _timed_write(store, batch)
                progress.update(len(batch))
        counts = store.counts()
        if url is None:
            store.close()  # folds the WAL into the file
            size = sum(os.path.getsize(file) for file in path.parent.glob(path.name + "*"))
        else:
            from es_rerank.learning.store_postgres import PostgresEventStore

            assert isinstance(store, PostgresEventStore)  # the store a postgresql:// URL opens
            size = store.size_bytes()
            store.close()
        request_us = _request_side(Path(scratch) / "requests.sqlite3", requests, queries, doc_ids, seed)
    figures = {
        "machine": machine_description(),
        "store": "sqlite" if url is None else "postgresql",
        "events": written,
        **counts,
        "clicks_per_impression": clicks_per_impression,
        "seed": seed,
        "bytes": size,
        "mb": round(size / 1e6, 1),
        "bytes_per_event": round(size / written, 1),
        "write_s": round(writing_s, 2),
        "events_per_s": round(written / writing_s),
        "request_side_us": request_us,
    }
    click.echo(
        f"{figures['machine']} | {written:,} events ({counts['impressions']:,} impressions of {PAGE} results, "
        f"{counts['clicks']:,} clicks)"
    )
    click.echo(
        f"store: {figures['mb']:,} MB ({figures['bytes_per_event']} bytes/event); written in "
        f"{figures['write_s']} s ({figures['events_per_s']:,} events/s, batches of {BATCH})"
    )
    click.echo(
        f"request side (decode, validate, queue one impression): p50 {request_us['p50']} µs, "
        f"p99 {request_us['p99']} µs over {requests:,} calls"
    )
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")


def _timed_write(store: TableStore, batch: list[Received]) -> float:
    started = time.perf_counter()
    store.write(batch)
    return time.perf_counter() - started


def _request_side(path: Path, requests: int, queries: list[str], doc_ids: list[str], seed: int) -> dict[str, float]:
    """µs per impression to decode, validate and queue it, while the recorder's writer stores them in ``path``."""
    import numpy as np

    from es_rerank.learning.events import read_events
    from es_rerank.learning.recorder import EventRecorder
    from es_rerank.learning.store import open_store

    bodies = [
        json.dumps(received.event.model_dump(exclude_none=True)).encode()
        for received in synthetic_events(requests, 0.0, queries, doc_ids, seed + 1)
    ]
    recorder = EventRecorder(lambda: open_store(str(path)), capacity=len(bodies))
    timings = []
    for body in bodies:
        started = time.perf_counter()
        recorder.record(read_events(json.loads(body), 50))
        timings.append(time.perf_counter() - started)
    recorder.close(timeout_s=60)
    micros = np.array(timings) * 1e6
    return {"p50": round(float(np.percentile(micros, 50)), 1), "p99": round(float(np.percentile(micros, 99)), 1)}
