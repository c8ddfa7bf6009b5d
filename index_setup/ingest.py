"""Streaming, parallel tokenisation for index builds: documents in, ``TokenizedBatch``es out, in corpus order.

The corpus is read here (one pass, never held whole), cut into batches of
``batch_size`` documents and tokenized by ``workers`` processes
(``es_rerank.stats_writer.tokenize_batch``); at most two batches per worker are in
flight, so a fast reader cannot pile up text in memory. A corpus that fits in one
batch is tokenized in this process: starting processes would cost more than it
saves. Processes are spawned, not forked: the caller may already hold threads
(tantivy's indexer).
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import chain, islice

from es_rerank.machine import usable_cores
from es_rerank.stats import Document
from es_rerank.stats_writer import TokenizedBatch, tokenize_batch

BATCH_SIZE = 1_000  # documents a worker tokenizes at a time


Raw = list[tuple[str, str, str]]  # a batch of (doc_id, title, abstract)


def _batches(documents: Iterable[Document], size: int) -> Iterator[tuple[Raw, list[dict]]]:
    """The corpus cut into batches: what the tokenizers read, and each document's ``_source``."""
    iterator = iter(documents)
    while chunk := list(islice(iterator, size)):
        yield [(d.doc_id, d.title, d.abstract) for d in chunk], [d.source() for d in chunk]


def _with_sources(batch: TokenizedBatch, sources: list[dict]) -> TokenizedBatch:
    batch.sources = sources
    return batch


def tokenized_batches(
    documents: Iterable[Document], workers: int | None = None, batch_size: int = BATCH_SIZE
) -> Iterator[tuple[Raw, TokenizedBatch]]:
    """The corpus in order, batch by batch: the documents and their ``TokenizedBatch``, tokenized by
    ``workers`` processes (0: this one)."""
    workers = usable_cores() if workers is None else workers
    batches = _batches(documents, batch_size)
    first = next(batches, None)
    if first is None:
        return
    if workers == 0 or len(first[0]) < batch_size:
        for batch, sources in chain([first], batches):
            yield batch, _with_sources(tokenize_batch(batch), sources)
        return
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    pending: deque[tuple[Raw, list[dict], Future]] = deque()
    try:
        for batch, sources in chain([first], batches):
            pending.append((batch, sources, pool.submit(tokenize_batch, batch)))
            if len(pending) >= 2 * workers:
                raw, sources, future = pending.popleft()
                yield raw, _with_sources(future.result(), sources)
        while pending:
            raw, sources, future = pending.popleft()
            yield raw, _with_sources(future.result(), sources)
    except BrokenProcessPool as error:
        raise RuntimeError(
            f"a tokenizing process died ({error}); if memory ran out, build with fewer workers "
            "(--workers), or with --workers 0 to tokenize in one process"
        ) from None
    finally:
        for _, _, future in pending:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
