"""``esrr bench integrity``: what checking the served files costs, at open and per search, on NFCorpus.

The figures behind the choices of ``es_rerank.manifest`` (sizes at every open, checksums
where the whole version is read anyway) and ``es_rerank.held_files`` (mapped from held
descriptors, leased or checked around a search's reads, rather than read with ``pread``):
a search of the embedded index (its top 500 with their statistics, then a page of 10
``_source``) timed in the same run without any check, with the files' fingerprints checked
before and after (what a process without leases does), and with the files leased (what
``esrr serve`` does).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click
import numpy as np
import xxhash

from es_rerank.cli_options import json_out_option


def _median_s(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _hash_rates() -> dict[str, float]:
    """GiB/s of each checksum over 256 MiB of random bytes (freed on return, before the other figures)."""
    block = np.random.default_rng(0).bytes(256 << 20)
    hashers: dict[str, Callable[[bytes], str]] = {
        "xxh3_128": xxhash.xxh3_128_hexdigest,
        "sha256": lambda b: hashlib.sha256(b).hexdigest(),
        "blake2b": lambda b: hashlib.blake2b(b).hexdigest(),
    }
    return {name: len(block) / _median_s(functools.partial(fn, block), 3) / 2**30 for name, fn in hashers.items()}


class _PreadRows:
    """Each hit's term ids read with ``pread`` from the statistics files: the read that no cut file can signal."""

    FIELDS = ("title", "abstract")  # the first tokens derive from these (statistics format 3)

    def __init__(self, directory: Path) -> None:
        self.files: dict[str, tuple[int, int, np.dtype]] = {}
        for field in self.FIELDS:
            for part in ("ptr", "values"):
                path = directory / f"{field}_{part}.npy"
                with open(path, "rb") as stream:
                    np.lib.format.read_magic(stream)
                    _, _, dtype = np.lib.format.read_array_header_1_0(stream)
                    offset = stream.tell()
                self.files[f"{field}_{part}"] = (os.open(path, os.O_RDONLY), offset, dtype)

    def _slice(self, name: str, start: int, stop: int) -> np.ndarray:
        descriptor, offset, dtype = self.files[name]
        data = os.pread(descriptor, (stop - start) * dtype.itemsize, offset + start * dtype.itemsize)
        if len(data) != (stop - start) * dtype.itemsize:
            raise OSError(f"{name}.npy is shorter than its rows")
        return np.frombuffer(data, dtype)

    def doc_terms(self, row: int) -> list[np.ndarray]:
        out = []
        for field in self.FIELDS:
            start, stop = self._slice(f"{field}_ptr", row, row + 2)
            out.append(self._slice(f"{field}_values", int(start), int(stop)))
        return out

    def close(self) -> None:
        for descriptor, _, _ in self.files.values():
            os.close(descriptor)


def _screen_ms(stats, rows: list[int], repeats: int) -> tuple[float, int]:
    """What ``worker.poison`` adds to each task a worker pops: the envelope of a ``rerank.score`` for ``rows``."""
    import base64

    from kombu.transport.virtual.base import Channel

    from es_rerank.lex import LEX3
    from es_rerank.payload import TASK_NAME, build_request, encode
    from worker.poison import envelope_problem

    request = build_request("vitamin d and breast cancer", [stats.doc_terms(row) for row in rows], stats, LEX3)
    body = json.dumps([[encode(request)], {}, {"callbacks": None, "errbacks": None}]).encode()
    envelope = json.dumps(
        {
            "body": base64.b64encode(body).decode(),
            "headers": {"task": TASK_NAME, "id": "bench"},
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "properties": {
                "body_encoding": "base64",
                "delivery_tag": "bench",
                "delivery_info": {"exchange": "", "routing_key": "rerank"},
            },
        }
    ).encode()
    if envelope_problem(envelope, Channel.codecs) is not None:
        raise click.ClickException("the benchmark's task envelope does not pass the worker's screen")
    return _median_s(lambda: envelope_problem(envelope, Channel.codecs), repeats) * 1000, len(envelope)


def _search_costs(documents: list, queries: list[str], root: Path, repeats: int) -> dict[str, Any]:
    """Per-search medians (ms) of the embedded index's searches unchecked, fingerprinted and leased, interleaved
    in each run so that the machine's load weighs on each alike; the guard's own costs (us)."""
    from es_rerank.backends.embedded import EmbeddedBackend
    from es_rerank.held_files import watch_leases
    from index_setup.embedded_index import build_embedded_index

    build_embedded_index(documents, root, version="bench", progress=False, workers=0)
    backends = {"unchecked": EmbeddedBackend.open_current(root), "fingerprinted": EmbeddedBackend.open_current(root)}
    # The same reads with no check at all: the baseline replaces the method on this one instance.
    backends["unchecked"].reading = nullcontext  # type: ignore[method-assign]
    if watch_leases():  # this process's main thread: the SIGIO handler, as in esrr serve
        backends["leased"] = EmbeddedBackend.open_current(root)
    files = backends["fingerprinted"]._files
    leased_files = len(backends["leased"]._files.leased) if "leased" in backends else 0
    bodies = [{"query": {"match": {"text": text}}} for text in queries]

    def search(backend: EmbeddedBackend, body: dict) -> None:
        prepared = backend.prepare(body)
        hits = backend.first_stage(prepared, 500).hits
        backend.page(prepared, hits[:10])

    # Each query searched in every mode in turn (the order rotating), so that a busy moment of a shared machine
    # weighs on all modes alike; a run's total per mode, and its ratio to the unchecked total of the same run.
    names = list(backends)
    totals: dict[str, list[float]] = {name: [] for name in names}
    for run in range(repeats):
        spent = dict.fromkeys(names, 0.0)
        for number, body in enumerate(bodies):
            for name in names[(run + number) % len(names) :] + names[: (run + number) % len(names)]:
                started = time.perf_counter()
                search(backends[name], body)
                spent[name] += time.perf_counter() - started
        for name in names:
            totals[name].append(spent[name])
    per_search_ms = {name: statistics.median(values) / len(bodies) * 1000 for name, values in totals.items()}
    figures: dict[str, Any] = {
        "files_held": len(files.files),
        "files_leased": leased_files,
        "search_ms": per_search_ms,
        "over_unchecked": {
            name: statistics.median(mode / plain for mode, plain in zip(totals[name], totals["unchecked"]))
            for name in names
        },
        "fingerprint_check_us": _median_s(files.change, repeats * 10) * 1e6,
    }
    if "leased" in backends:
        guard = backends["leased"]._files

        def leased_read() -> None:
            with guard.reading():
                pass

        figures["leased_read_us"] = _median_s(leased_read, repeats * 10) * 1e6
    return figures


# What another process does to a served file, and which file: (path under the version, writer's code on argv[1]).
_WRITERS = {
    "cut short": "import os, sys; os.truncate(sys.argv[1], os.path.getsize(sys.argv[1]) // 3)",
    "rewritten, mtime restored": (
        "import os, sys\npath = sys.argv[1]\nst = os.stat(path)\nwith open(path, 'r+b') as f:\n"
        "    data = f.read(); third = len(data) // 3; f.seek(third); f.write(data[third:2 * third][::-1])\n"
        "os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))"
    ),
    "unlinked": "import os, sys; os.unlink(sys.argv[1])",
}
_CHANGES = (
    ("stats/title_ptr.npy", "cut short"),
    ("stats/title_ptr.npy", "rewritten, mtime restored"),
    ("stats/doc_ids.txt", "rewritten, mtime restored"),
    ("stats/title_values.npy", "unlinked"),
    ("tantivy/*.idx", "cut short"),
    ("tantivy/*.term", "rewritten, mtime restored"),
)


def _http(url: str) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error) if error.headers.get_content_type() == "application/json" else None


def _one_change(
    built: Path, scratch: Path, target: str, kind: str, queries: list[str], port: int, source: Path | None
) -> dict:
    """One ``esrr serve`` over a copy of ``built`` (the es_rerank of ``source`` when given), two clients searching,
    another process changing one file."""
    import http.client
    import shutil
    import subprocess
    import sys
    import threading

    home = scratch / "home"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(built, home)
    version = home / "indexes" / "embedded" / "bench"
    (path,) = version.glob(target)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ESRR_")}
    env.update(ESRR_HOME=str(home), ESRR_GATEWAY_RERANK="false", ESRR_GATEWAY_INDEX_CHECK_S="0")
    if source is not None:
        env["PYTHONPATH"] = str(source.absolute())
    url = f"http://127.0.0.1:{port}"
    with open(scratch / "gateway.log", "wb") as log:
        gateway = subprocess.Popen(
            [sys.executable, "-c", "from es_rerank.cli import main; main()", "serve", "--port", str(port)],
            cwd=scratch,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(600):
            try:
                _http(f"{url}/_esrr/health")
                break
            except OSError:
                time.sleep(0.1)

        def search(query: str) -> tuple[int, Any]:
            return _http(f"{url}/_search?{urlencode({'q': query, 'size': 10})}")

        before = {query: search(query)[1]["hits"]["hits"] for query in queries}
        answers: list[tuple[str, int, Any]] = []
        stop = threading.Event()

        def client(offset: int) -> None:
            number = offset
            while not stop.is_set():
                query = queries[number % len(queries)]
                number += 2
                try:
                    answers.append((query, *search(query)))
                except (OSError, http.client.HTTPException):
                    answers.append((query, 0, None))  # no answer: the gateway is gone
                    return

        clients = [threading.Thread(target=client, args=(offset,)) for offset in (0, 1)]
        for thread in clients:
            thread.start()
        time.sleep(0.5)
        subprocess.run([sys.executable, "-c", _WRITERS[kind], str(path)], check=True, timeout=120)
        time.sleep(1.0)
        stop.set()
        for thread in clients:
            thread.join(60)
        died = gateway.poll() is not None
        health = None if died else _http(f"{url}/_esrr/health")[1]
    finally:
        gateway.terminate()
        gateway.wait(30)
    statuses = [status for _, status, _ in answers]
    mixed = sum(status == 200 and body["hits"]["hits"] != before[query] for query, status, body in answers)
    return {
        "died": died,
        "answers": len(answers),
        "200": statuses.count(200),
        "503": statuses.count(503),
        "500": statuses.count(500),
        "other": sum(s not in (200, 500, 503) for s in statuses),
        "mixed": mixed,
        "health": None if health is None else health.get("status"),
    }


def _changes_under_load(
    documents: list, queries: list[str], scratch: Path, runs: int, source: Path | None = None
) -> list[dict]:
    """Each of ``_CHANGES`` ``runs`` times against a real ``esrr serve`` (its files leased) under two clients."""
    import socket

    from index_setup.embedded_index import build_embedded_index

    built = scratch / "built"
    build_embedded_index(documents, built / "indexes" / "embedded", version="bench", progress=False, workers=0)
    rows = []
    for target, kind in _CHANGES:
        results = []
        for _ in range(runs):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            results.append(_one_change(built, scratch, target, kind, queries, port, source))
        rows.append(
            {
                "file": target,
                "change": kind,
                "runs": runs,
                **{
                    key: sum(result[key] for result in results)
                    for key in ("died", "answers", "200", "503", "500", "other", "mixed")
                },
                "health": sorted({str(result["health"]) for result in results}),
            }
        )
    return rows


@click.command(name="integrity")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None, help="NFCorpus directory.")
@click.option("--repeats", default=30, show_default=True, type=click.IntRange(min=3), help="Runs per timing.")
@click.option(
    "--hits",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Hits whose term ids one search reads.",
)
@click.option(
    "--changes-under-load",
    "change_runs",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Also change served files under a real `esrr serve` and two clients, this many runs a change.",
)
@click.option(
    "--gateway-source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A source checkout whose es_rerank the changed-under-load gateway runs (e.g. an older commit's).",
)
@json_out_option("Also write the figures as JSON.")
def bench_integrity(
    data: Path | None, repeats: int, hits: int, change_runs: int, gateway_source: Path | None, json_out: Path | None
) -> None:
    """Print medians: checksum speed, opening a statistics version with and without checksums, the check a
    search makes, and a search's reads mapped against ``pread``."""
    from es_rerank.machine import machine_description
    from es_rerank.manifest import checksum_of_file
    from es_rerank.stats import CorpusStats, build_stats
    from index_setup.nfcorpus import NFCorpus

    try:
        documents = list(NFCorpus.locate(data).documents())
    except (FileNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    if not documents:
        raise click.ClickException("the corpus holds no readable document; point --data at an NFCorpus folder")
    hash_rates = _hash_rates()

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "stats"
        build_stats("bench", documents).save(directory)
        size = sum(path.stat().st_size for path in directory.iterdir())
        files = sorted(directory.iterdir())
        checksums = _median_s(lambda: [checksum_of_file(path) for path in files], repeats)
        open_sizes = _median_s(lambda: CorpusStats.load(directory), repeats)
        open_full = _median_s(lambda: CorpusStats.load(directory, check_ids=True), repeats)
        stats = CorpusStats.load(directory)
        check = _median_s(stats.changed_files, repeats * 10)
        rows = [int(row) for row in np.random.default_rng(1).integers(0, stats.n_docs, hits)]
        mapped = _median_s(lambda: [stats.doc_terms(row) for row in rows], repeats)
        screen_ms, envelope_bytes = _screen_ms(stats, rows, repeats * 10)
        pread = _PreadRows(directory)
        try:
            read = _median_s(lambda: [pread.doc_terms(row) for row in rows], repeats)
        finally:
            pread.close()
        queries = list(NFCorpus.locate(data).all_queries().values())[:50]
        searches = _search_costs(documents, queries, Path(tmp) / "embedded", repeats)
        changes = _changes_under_load(documents, queries, Path(tmp), change_runs, gateway_source) if change_runs else []

    figures: dict[str, Any] = {
        "machine": machine_description(),
        "documents": len(documents),
        "statistics_bytes": size,
        "checksum_gib_per_s": hash_rates,
        "checksum_all_files_ms": checksums * 1000,
        "open_sizes_checked_ms": open_sizes * 1000,
        "open_ids_and_checksums_checked_ms": open_full * 1000,
        "check_before_search_us": check * 1e6,
        "hits": hits,
        "read_hits_mapped_ms": mapped * 1000,
        "read_hits_pread_ms": read * 1000,
        "pread_over_mapped": read / mapped,
        "task_envelope_bytes": envelope_bytes,
        "poison_screen_of_a_task_ms": screen_ms,
        "searches": searches,
        "changes_under_load": changes,
    }
    click.echo(f"machine: {figures['machine']}")
    click.echo(
        "checksums (GiB/s, 256 MiB in memory, median of 3): "
        + ", ".join(f"{name} {rate:.2f}" for name, rate in hash_rates.items())
    )
    click.echo(
        f"statistics of {len(documents)} NFCorpus documents: {size / 1e6:.1f} MB "
        f"({size / len(documents):,.0f} bytes a document)"
    )
    click.echo(
        f"checksums of all its files: {figures['checksum_all_files_ms']:.2f} ms "
        f"({size / checksums / 2**30:.1f} GiB/s from the page cache)"
    )
    click.echo(
        f"open, sizes checked: {figures['open_sizes_checked_ms']:.1f} ms; with term ids and checksums "
        f"(esrr index use): {figures['open_ids_and_checksums_checked_ms']:.1f} ms (medians of {repeats})"
    )
    click.echo(f"check before a search (fstat of each mapped file): {figures['check_before_search_us']:.1f} us")
    click.echo(
        f"term ids of {hits} hits: mapped {figures['read_hits_mapped_ms']:.2f} ms, pread "
        f"{figures['read_hits_pread_ms']:.2f} ms ({figures['pread_over_mapped']:.1f}x)"
    )
    click.echo(
        f"worker's poison screen of a task envelope for those hits ({envelope_bytes:,} bytes): {screen_ms:.3f} ms"
    )
    ms, over = searches["search_ms"], searches["over_unchecked"]
    click.echo(
        f"a search (top 500 with their statistics, a page of 10 _source; {len(queries)} NFCorpus queries, "
        f"medians of {repeats}), its {searches['files_held']} files: unchecked {ms['unchecked']:.3f} ms, "
        f"fingerprints checked before and after {ms['fingerprinted']:.3f} ms "
        f"({over['fingerprinted']:.3f}x, median of the runs' ratios), one check "
        f"{searches['fingerprint_check_us']:.1f} us"
    )
    if "leased" in ms:
        click.echo(
            f"  leased ({searches['files_leased']} leases): {ms['leased']:.3f} ms ({over['leased']:.3f}x), "
            f"a read's guard {searches['leased_read_us']:.2f} us"
        )
    else:
        click.echo("  leased: not measured (not this process's main thread)")
    if changes:
        click.echo(
            f"served files changed by another process under esrr serve and 2 clients ({change_runs} runs each; "
            "none: no answer or another status; mixed: a 200 whose hits differ from the unchanged index's):"
        )
        click.echo(
            f"  {'file':<24}{'change':<27}{'died':>5}{'answers':>9}{'200':>6}{'503':>6}{'500':>5}"
            f"{'none':>6}{'mixed':>7}  health after"
        )
        for row in changes:
            click.echo(
                f"  {row['file']:<24}{row['change']:<27}{row['died']:>5}{row['answers']:>9}{row['200']:>6}"
                f"{row['503']:>6}{row['500']:>5}{row['other']:>6}{row['mixed']:>7}  {', '.join(row['health'])}"
            )
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2), encoding="utf-8")
