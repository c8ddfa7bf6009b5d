"""``esrr bench scale``: build and serve generated PubMed-like corpora of growing size, and project to 36M.

Per size (10k and 100k documents; 1M with ``--million``), each step in a process of
its own so that its peak memory is its own:

1. generate the corpus once (``esrr generate pubmed``, seed 0; kept under ``--work``),
2. build the embedded index from its BEIR JSONL (the corpus after the updates) and,
   separately, from the PubMed baseline + update XML files: documents/s end to end
   (reading included) and peak RSS of the build process and of its largest
   tokenizing process (``getrusage``),
3. with ``--baseline DIR`` (a checkout of an older commit, e.g. 0862e0b): the same
   BEIR build by that code, in the same run, for the rate ratio,
4. open the built index as a serving process does: start time, private memory (USS,
   from ``/proc/self/smaps_rollup``), BM25 top-500 p50/p99 over NFCorpus dev queries,
   and the in-process served pipeline p50/p99 with a random-weight Delta-32-Lex3
   model (random word vectors for the corpus's most frequent terms): what is timed is
   the work, not the quality,
5. index and statistics bytes per document.

Growth is fitted per figure as ``a * n^b`` over the sizes measured (log-log least
squares) and projected to 36M documents.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np

from es_rerank.cli_options import json_out_option

PUBMED_DOCS = 36_000_000
SIZES = (10_000, 100_000)
MILLION = 1_000_000
_CHILD = "benchmarks.scale"


def _directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _anonymous_bytes() -> int:
    """Anonymous memory of this process: what it holds itself, not pages of mapped files (which a USS counts
    while only this process maps them, and the kernel can drop at any time)."""
    with open("/proc/self/smaps_rollup", encoding="utf-8") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    return 0


def _uss_bytes() -> int:
    """Private memory (clean + dirty) of this process."""
    total = 0
    with open("/proc/self/smaps_rollup", encoding="utf-8") as rollup:
        for line in rollup:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1]) * 1024
    return total


def _peak_rss() -> dict[str, int]:
    """Peak RSS of this process and of its largest child, in bytes (Linux reports KiB)."""
    return {
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_rss_worker_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    }


# --- the steps, each run as `python -m benchmarks.scale STEP JSON-ARGS` -----------------------------


def child_build(data: str, root: str, workers: int | None) -> dict:
    """Build the embedded index of ``data`` under ``root``: rate and memory."""
    from index_setup.embedded_index import build_embedded_index
    from index_setup.readers import LoadReport, read_corpus

    report = LoadReport()
    started = time.perf_counter()
    result = build_embedded_index(
        read_corpus(Path(data), report=report), Path(root), version="v1", progress=False, workers=workers
    )
    seconds = time.perf_counter() - started
    version = Path(root) / "v1"
    return {
        "docs": result.n_docs,
        "terms": result.n_terms,
        "seconds": seconds,
        "docs_per_s": result.n_docs / seconds,
        "index_bytes": _directory_bytes(version / "tantivy"),
        "stats_bytes": _directory_bytes(version / "stats"),
        "load": report.summary(),
        **_peak_rss(),
    }


def child_baseline(base: str, data: str, root: str) -> dict:
    """The same BEIR build by the code at ``base`` (an older checkout)."""
    sys.path.insert(0, base)
    for name in [m for m in sys.modules if m.split(".")[0] in ("es_rerank", "index_setup")]:
        del sys.modules[name]
    from index_setup.embedded_index import build_embedded_index  # the checkout's, first on the path
    from index_setup.readers import read_corpus

    started = time.perf_counter()
    result = build_embedded_index(read_corpus(Path(data)), Path(root), version="v1", progress=False)
    seconds = time.perf_counter() - started
    return {
        "docs": result.n_docs,
        "seconds": seconds,
        "docs_per_s": result.n_docs / seconds,
        "code": base,
        **_peak_rss(),
    }


def child_es_load(data: str, es_url: str, home: str, threads: int) -> dict:
    """Load the BEIR corpus ``data`` into the Elasticsearch at ``es_url`` (``esrr index build``'s code path with
    ``threads`` bulk loops): rate, peak RSS, the index's store bytes and the stored JSON bytes per document."""
    import uuid

    from elasticsearch import Elasticsearch

    from es_rerank.settings import CommonSettings
    from index_setup.es_index import TERM_FIELDS, load_index
    from index_setup.readers import read_corpus

    settings = CommonSettings(
        home=Path(home),
        backend="elasticsearch",
        es_url=es_url,
        es_alias=f"esrr-bench-{uuid.uuid4().hex[:8]}",
        es_bulk_threads=threads,
        es_timeout_s=300,
    )
    client = Elasticsearch(es_url, request_timeout=300)
    started = time.perf_counter()
    result = load_index(client, read_corpus(Path(data)), settings, progress=False)
    seconds = time.perf_counter() - started
    try:
        store = client.indices.stats(index=result.index, metric="store")["_all"]["primaries"]["store"]
        sample = client.search(index=result.index, size=1000, query={"match_all": {}})["hits"]["hits"]
        sources = [json.dumps(hit["_source"], separators=(",", ":")).encode() for hit in sample]
        source_bytes = float(np.mean([len(source) for source in sources]))
        # The same without the stored term-id arrays (the gateway reads them from its statistics).
        texts = [
            json.dumps(
                {k: v for k, v in hit["_source"].items() if k not in TERM_FIELDS}, separators=(",", ":")
            ).encode()
            for hit in sample
        ]
    finally:
        client.options(ignore_status=404).indices.delete(index=result.index)
        client.close()
    return {
        "docs": result.n_docs,
        "threads": threads,
        "seconds": seconds,
        "docs_per_s": result.n_docs / seconds,
        "store_bytes_per_doc": store["size_in_bytes"] / result.n_docs,
        "source_bytes_per_doc": source_bytes,
        "source_deflate_ratio": _deflate_ratio(sources),
        "text_source_bytes_per_doc": float(np.mean([len(text) for text in texts])),
        "text_source_deflate_ratio": _deflate_ratio(texts),
        "stats_bytes_per_doc": _directory_bytes(result.stats_dir) / result.n_docs,
        **_peak_rss(),
    }


def _deflate_ratio(sources: list[bytes], block: int = 60_000) -> float:
    """Compressed / raw size of ``sources`` deflated in blocks of about ``block`` bytes, the way Lucene's
    ``best_compression`` stores documents (its default codec, LZ4, compresses less)."""
    import zlib

    raw = compressed = 0
    chunk = b""
    for source in sources + [b""]:
        if len(chunk) >= block or (not source and chunk):
            raw, compressed = raw + len(chunk), compressed + len(zlib.compress(chunk, 6))
            chunk = b""
        chunk += source
    return compressed / raw if raw else 1.0


def _random_model(home: Path, stats_version: str, stats, words: int) -> None:
    """Random embeddings for the ``words`` most frequent terms and a random-weight Delta-32-Lex3 checkpoint."""
    import torch

    from es_rerank.versions import write_pointer
    from worker.model import VARIANTS, Checkpoint, DeltaConfig, DeltaModel

    frequent = np.argsort(-np.asarray(stats.df["text"]), kind="stable")[:words]
    vocab = ["<pad>", "<unk>", *(stats.vocab.terms[int(i)] for i in frequent)]
    rng = np.random.default_rng(0)
    vectors = rng.normal(0.0, 0.3, size=(len(vocab), 300)).astype(np.float32)
    vectors[0] = 0.0
    emb_dir = home / "embeddings" / "bench"
    emb_dir.mkdir(parents=True, exist_ok=True)
    np.save(emb_dir / "vectors.npy", vectors)
    (emb_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (emb_dir / "meta.json").write_text(
        json.dumps({"format": 1, "version": "bench", "dim": 300, "n_words": len(vocab)}), encoding="utf-8"
    )
    write_pointer(home / "embeddings", "bench")
    torch.manual_seed(0)
    config = DeltaConfig(**VARIANTS["delta-32-lex3"])
    model = DeltaModel(config, vectors)
    (home / "models").mkdir(parents=True, exist_ok=True)
    Checkpoint(config, model.state_dict(), "bench", stats_version).save(home / "models" / "delta-32-lex3.pt")


def child_serve(home: str, queries: list[str], rounds: int) -> dict:
    """Open the index as a serving process: start time, USS, BM25 and served-pipeline latency."""
    os.environ["ESRR_HOME"] = home
    os.environ.setdefault("ESRR_TORCH_THREADS", "1")
    from es_rerank.backends.base import text_hits
    from es_rerank.backends.embedded import EmbeddedBackend

    uss_before, anonymous_before = _uss_bytes(), _anonymous_bytes()
    started = time.perf_counter()
    backend = EmbeddedBackend.open_current(Path(home) / "indexes" / "embedded")
    start_s = time.perf_counter() - started
    for query in queries:  # warm-up pass: the first touch of each page
        text_hits(backend, query, 500)
    bm25 = []
    for _ in range(rounds):
        for query in queries:
            t = time.perf_counter()
            text_hits(backend, query, 500)
            bm25.append((time.perf_counter() - t) * 1000)
    uss_index = _uss_bytes() - uss_before
    figures: dict[str, Any] = {
        "start_s": start_s,
        "uss_index_bytes": uss_index,
        "uss_process_bytes": _uss_bytes(),
        "anonymous_index_bytes": _anonymous_bytes() - anonymous_before,
        "bm25_p50_ms": float(np.percentile(bm25, 50)),
        "bm25_p99_ms": float(np.percentile(bm25, 99)),
    }

    import torch

    torch.set_num_threads(1)
    from es_rerank.cli_options import load_settings
    from es_rerank.ranking.answer import answer
    from es_rerank.ranking.assemble import served_pipeline
    from es_rerank.ranking.request import text_request
    from worker.local import LocalReranker
    from worker.settings import WorkerSettings

    _random_model(Path(home), backend.version, backend.stats, words=100_000)
    settings = load_settings(WorkerSettings)
    uss_before_model = _uss_bytes()
    pipeline = served_pipeline(
        settings,
        500,
        rerank=True,
        use_neighbours=False,
        keep_vectors=True,
        local_reranker=lambda: LocalReranker(settings),
    )
    asked = [text_request(query, 10) for query in queries]  # what a client sends: answered as _search answers it
    for query, one in zip(queries, asked):
        ranking = answer(pipeline, one).ranking
        if ranking.fallback:
            raise RuntimeError(f"the model did not score {query!r}: {ranking.fallback}")
    served = []
    for _ in range(rounds):
        for one in asked:
            t = time.perf_counter()
            answer(pipeline, one)
            served.append((time.perf_counter() - t) * 1000)
    figures.update(
        {
            "served_p50_ms": float(np.percentile(served, 50)),
            "served_p99_ms": float(np.percentile(served, 99)),
            "uss_with_model_bytes": _uss_bytes(),
            "uss_model_and_pipeline_bytes": _uss_bytes() - uss_before_model,
            "ranker": ranking.ranker,
        }
    )
    if pipeline.reranker is not None:
        pipeline.reranker.close()
    return figures


def _run_child(step: str, *args: object, env: dict | None = None, timeout: float = 7200) -> dict:
    """Run one step in a fresh interpreter; its JSON result (the last line of stdout)."""
    command = [sys.executable, "-m", _CHILD, step, json.dumps(list(args))]
    load_before = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise click.ClickException(f"step {step} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    # The machine's 1-minute load average around the step: other work on the cores moves every figure.
    return {
        **json.loads(done.stdout.strip().splitlines()[-1]),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


def fit_power(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """(a, b) of value = a * size^b, least squares on log-log (b = 1 for a single size)."""
    if len(sizes) < 2 or min(values) <= 0:
        return (values[0] / sizes[0] if values[0] > 0 else 0.0), 1.0
    b, log_a = np.polyfit(np.log(sizes), np.log(values), 1)
    return float(math.exp(log_a)), float(b)


PROJECTED = (
    ("build_docs_per_s", "build docs/s"),
    ("build_peak_rss_bytes", "build peak RSS"),
    ("index_bytes_per_doc", "index bytes/doc"),
    ("stats_bytes_per_doc", "statistics bytes/doc"),
    ("start_s", "serving start s"),
    ("uss_index_bytes", "serving USS (index)"),
    ("anonymous_index_bytes", "serving anonymous (index)"),
    ("bm25_p50_ms", "BM25 top-500 p50 ms"),
    ("served_p50_ms", "served p50 ms"),
)


@click.command(name="scale")
@click.option(
    "--sizes",
    default=",".join(str(s) for s in SIZES),
    show_default=True,
    help="Corpus sizes (documents), comma-separated.",
)
@click.option(
    "--million", is_flag=True, help="Also build and serve 1,000,000 documents (CPU-heavy: about an hour on 2 cores)."
)
@click.option(
    "--work",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the generated corpora (kept for the next run) and the indexes (default: a temporary folder).",
)
@click.option(
    "--baseline",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="A checkout of older code (e.g. `git worktree add ../wt-base 0862e0b`) whose build runs "
    "beside this one on the same corpus.",
)
@click.option(
    "--baseline-max",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Largest size the baseline builds (its memory grows with the corpus).",
)
@click.option(
    "--xml-max",
    type=click.IntRange(min=1),
    default=None,
    help="Largest size also built from the PubMed XML files (default: every size).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Tokenizing processes of the build (default: one per core).",
)
@click.option(
    "--es-url",
    default=None,
    help="Also load each corpus into this Elasticsearch (e.g. a noida-db "
    "started for the run): documents/s per --es-threads, bytes per document.",
)
@click.option(
    "--es-max",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Largest size loaded into --es-url.",
)
@click.option("--es-threads", default="1,2", show_default=True, help="Bulk loops (ESRR_ES_BULK_THREADS) to time.")
@click.option(
    "--queries",
    "n_queries",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="NFCorpus dev queries timed.",
)
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True, help="Passes over them.")
@click.option(
    "--previous",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The --json-out of an earlier run (same machine) whose sizes join this run's table and fit "
    "(e.g. 10k and 100k, then --sizes 1000000 alone).",
)
@click.option(
    "--show",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Print the table of an earlier --json-out and stop (nothing is built); given several times, "
    "their sizes are joined (a later file's size replaces an earlier's) and fitted together.",
)
@json_out_option("Also write the figures as JSON.")
def bench_scale(
    sizes: str,
    million: bool,
    work: Path | None,
    baseline: Path | None,
    baseline_max: int,
    xml_max: int | None,
    workers: int | None,
    es_url: str | None,
    es_max: int,
    es_threads: str,
    n_queries: int,
    rounds: int,
    previous: Path | None,
    show: tuple[Path, ...],
    json_out: Path | None,
) -> None:
    """Build and serve generated PubMed-like corpora; per size: rate, memory, sizes, latency; projected to 36M."""
    if show:
        shown = json.loads(show[0].read_text(encoding="utf-8"))
        for later in show[1:]:
            shown = _joined(shown, json.loads(later.read_text(encoding="utf-8")), str(later))
        _fit(shown)
        _print(shown)
        if json_out is not None:
            json_out.write_text(json.dumps(shown, indent=2) + "\n", encoding="utf-8")
        return
    from es_rerank.machine import machine_description
    from index_setup.generate import generate_pubmed, load_pool
    from index_setup.nfcorpus import DEFAULT_NFCORPUS, NFCorpus

    try:
        counts = sorted({int(s) for s in sizes.split(",") if s.strip()} | ({MILLION} if million else set()))
    except ValueError:
        raise click.BadParameter(
            f"{sizes!r}: give sizes as integers, e.g. 10000,100000", param_hint="--sizes"
        ) from None
    if not counts or min(counts) < 1000:
        raise click.BadParameter("give sizes of at least 1000 documents", param_hint="--sizes")
    queries = list(NFCorpus.locate(None).queries("dev").values())[:n_queries]
    temporary = None
    if work is None:
        temporary = tempfile.TemporaryDirectory()
        work = Path(temporary.name)
    work.mkdir(parents=True, exist_ok=True)
    pool = None
    rows = []
    try:
        for n in counts:
            corpus = work / f"corpus-{n}"
            if not (corpus / "generation.json").is_file():
                pool = pool or load_pool(DEFAULT_NFCORPUS.parent)
                click.echo(f"generating {n:,} documents into {corpus}", err=True)
                generate_pubmed(corpus, n, pool, progress=False)
            generated = json.loads((corpus / "generation.json").read_text(encoding="utf-8"))
            row: dict = {"docs": n, "final_docs": generated["final_docs"], "minted_words": generated["minted_words"]}
            runs = work / f"runs-{n}"
            _fresh(runs)
            click.echo(f"{n:,}: building from BEIR JSONL", err=True)
            beir = _run_child("build", str(corpus / "beir" / "corpus.jsonl.gz"), str(runs / "beir"), workers)
            served_home = runs / "home" / "indexes" / "embedded"
            if xml_max is None or n <= xml_max:
                click.echo(f"{n:,}: building from PubMed baseline + update XML", err=True)
                xml = _run_child("build", str(corpus), str(served_home), workers)
                row.update(
                    {
                        "xml_build_docs_per_s": xml["docs_per_s"],
                        "xml_build_peak_rss_bytes": xml["peak_rss_bytes"],
                        "xml_load": xml["load"],
                    }
                )
            else:  # the BEIR build is served instead
                served_home.parent.mkdir(parents=True, exist_ok=True)
                (runs / "beir").rename(served_home)
            row.update(
                {
                    "build_docs_per_s": beir["docs_per_s"],
                    "build_seconds": beir["seconds"],
                    "build_peak_rss_bytes": beir["peak_rss_bytes"],
                    "build_worker_peak_rss_bytes": beir["peak_rss_worker_bytes"],
                    "terms": beir["terms"],
                    "build_load": [beir["load_before"], beir["load_after"]],
                    "index_bytes_per_doc": beir["index_bytes"] / beir["docs"],
                    "stats_bytes_per_doc": beir["stats_bytes"] / beir["docs"],
                }
            )
            if baseline is not None and n <= baseline_max:
                click.echo(f"{n:,}: baseline build ({baseline})", err=True)
                old = _run_child(
                    "baseline",
                    str(baseline),
                    str(corpus / "beir" / "corpus.jsonl.gz"),
                    str(runs / "baseline"),
                    env={"PYTHONPATH": str(baseline)},
                )
                row.update(
                    {
                        "baseline_docs_per_s": old["docs_per_s"],
                        "baseline_peak_rss_bytes": old["peak_rss_bytes"],
                        "baseline_load": [old["load_before"], old["load_after"]],
                        "rate_ratio": beir["docs_per_s"] / old["docs_per_s"],
                    }
                )
            if es_url is not None and n <= es_max:
                loads = []
                for threads in [int(t) for t in es_threads.split(",") if t.strip()]:
                    click.echo(f"{n:,}: loading into {es_url} with {threads} bulk loop(s)", err=True)
                    loads.append(
                        _run_child(
                            "es_load",
                            str(corpus / "beir" / "corpus.jsonl.gz"),
                            es_url,
                            str(runs / f"es-home-{threads}"),
                            threads,
                        )
                    )
                row["es_loads"] = loads
            click.echo(f"{n:,}: serving", err=True)
            served = _run_child("serve", str(runs / "home"), queries, rounds)
            serve_load = [served.pop("load_before"), served.pop("load_after")]
            row.update({**served, "serve_load": serve_load})
            rows.append(row)
            _fresh(runs)  # the indexes are big; the corpus stays for the next run
    finally:
        if temporary is not None:
            temporary.cleanup()
    figures: dict[str, Any] = {
        "machine": machine_description(),
        "queries": len(queries),
        "rounds": rounds,
        "sizes": rows,
        "projection_docs": PUBMED_DOCS,
        "projection": {},
    }
    if previous is not None:
        figures = _joined(json.loads(previous.read_text(encoding="utf-8")), figures, None)
        figures["previous"] = {"file": str(previous)}
    _fit(figures)
    _print(figures)
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


def _joined(earlier: dict, later: dict, later_file: str | None) -> dict:
    """``later``'s figures with the sizes of ``earlier`` it did not measure."""
    measured = {r["docs"] for r in later["sizes"]}
    joined = {
        **later,
        "sizes": sorted(
            [r for r in earlier["sizes"] if r["docs"] not in measured] + later["sizes"], key=lambda r: r["docs"]
        ),
    }
    if later_file is not None:
        joined["joined"] = [*earlier.get("joined", []), later_file]
    return joined


def _fit(figures: dict) -> None:
    """Fit each projected figure as a * n^b over the sizes and project it to 36M documents (in place)."""
    rows = figures["sizes"]
    figures["projection"] = {}
    for key, _label in PROJECTED:
        if any(key not in r for r in rows):  # a figure an earlier run did not measure
            continue
        a, b = fit_power([r["docs"] for r in rows], [float(r[key]) for r in rows])
        figures["projection"][key] = {"a": a, "b": b, "at_36m": a * PUBMED_DOCS**b}


def _fresh(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def _mb(value: float) -> str:
    return f"{value / 1e6:,.0f} MB"


def _print(figures: dict) -> None:
    click.echo(f"machine: {figures['machine']}")
    click.echo(f"latency over {figures['queries']} NFCorpus dev queries x {figures['rounds']} rounds")
    header = (
        f"{'docs':>9} {'build/s':>8} {'old/s':>7} {'ratio':>6} {'xml/s':>7} {'peak RSS':>9} {'worker':>8} "
        f"{'idx B/doc':>9} {'stats B/doc':>11} {'start s':>7} {'USS idx':>8} {'anon idx':>8} "
        f"{'bm25 p50/p99':>13} "
        f"{'served p50/p99':>15}"
    )
    click.echo(header)
    for r in figures["sizes"]:
        old = f"{r['baseline_docs_per_s']:7.0f} {r['rate_ratio']:5.2f}x" if "rate_ratio" in r else f"{'-':>7} {'-':>6}"
        xml = f"{r['xml_build_docs_per_s']:7.0f}" if "xml_build_docs_per_s" in r else f"{'-':>7}"
        anonymous = _mb(r["anonymous_index_bytes"]) if "anonymous_index_bytes" in r else "-"
        click.echo(
            f"{r['docs']:>9,} {r['build_docs_per_s']:8.0f} {old} {xml} "
            f"{_mb(r['build_peak_rss_bytes']):>9} {_mb(r['build_worker_peak_rss_bytes']):>8} "
            f"{r['index_bytes_per_doc']:9.0f} {r['stats_bytes_per_doc']:11.0f} {r['start_s']:7.2f} "
            f"{_mb(r['uss_index_bytes']):>8} {anonymous:>8} {r['bm25_p50_ms']:6.1f}/{r['bm25_p99_ms']:<6.1f} "
            f"{r['served_p50_ms']:7.1f}/{r['served_p99_ms']:<7.1f}"
        )
    click.echo("1-minute load average before/after each step (2 cores: above 2, other work shared them):")
    for r in figures["sizes"]:
        steps = [("build", r["build_load"]), ("baseline build", r.get("baseline_load")), ("serve", r["serve_load"])]
        click.echo(
            f"{r['docs']:>9,}  "
            + ", ".join(f"{name} {a:.1f}/{b:.1f}" for name, (a, b) in ((n, v) for n, v in steps if v is not None))
        )
    loads = [(r["docs"], load) for r in figures["sizes"] for load in r.get("es_loads", [])]
    if loads:
        click.echo("Elasticsearch loads (esrr's load_index: tokenize, statistics, _bulk):")
        click.echo(
            f"{'docs':>9} {'loops':>5} {'docs/s':>7} {'vs 1 loop':>9} {'store B/doc':>11} {'_source B/doc':>13} "
            f"{'deflated':>8} {'no ids':>6} {'deflated':>8} {'stats B/doc':>11} {'peak RSS':>9} {'load':>9}"
        )
        for n, load in loads:
            one = next((other for m, other in loads if m == n and other["threads"] == 1), None)
            ratio = f"{load['docs_per_s'] / one['docs_per_s']:8.2f}x" if one else f"{'-':>9}"
            click.echo(
                f"{n:>9,} {load['threads']:>5} {load['docs_per_s']:7.0f} {ratio} "
                f"{load['store_bytes_per_doc']:11.0f} {load['source_bytes_per_doc']:13.0f} "
                f"{load['source_deflate_ratio']:8.2f} "
                + (
                    f"{load['text_source_bytes_per_doc']:6.0f} {load['text_source_deflate_ratio']:8.2f} "
                    if "text_source_bytes_per_doc" in load
                    else f"{'-':>6} {'-':>8} "
                )
                + f"{load['stats_bytes_per_doc']:11.0f} {_mb(load['peak_rss_bytes']):>9} "
                f"{load['load_before']:4.1f}/{load['load_after']:<4.1f}"
            )
    if len(figures["sizes"]) < 2:
        click.echo("no projection: it needs two sizes or more")
        return
    click.echo(f"projection to {figures['projection_docs']:,} documents (fit a * n^b over the sizes above):")
    for key, label in PROJECTED:
        if key not in figures["projection"]:
            continue
        p = figures["projection"][key]
        in_bytes = key.endswith("rss_bytes") or key.startswith(("uss", "anonymous"))
        value = _mb(p["at_36m"]) if in_bytes else f"{p['at_36m']:,.2f}"
        click.echo(f"  {label:<24} b = {p['b']:5.2f}  ->  {value}")


if __name__ == "__main__":
    step, arguments = sys.argv[1], json.loads(sys.argv[2])
    steps: dict[str, Callable[..., Any]] = {
        "build": child_build,
        "baseline": child_baseline,
        "serve": child_serve,
        "es_load": child_es_load,
    }
    print(json.dumps(steps[step](*arguments)))
