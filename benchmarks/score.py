"""``esrr bench score``: reference ``DeltaModel.forward`` vs ``DeltaScorer`` on the same inputs.

Inputs imitate a BM25 top-500 window: document tokens drawn from a Zipf law
over the vocabulary (many repeats, ~3% UNK), 90% of the documents full N = 50
tokens and the rest shorter (title-only records), queries of 2-5 words padded
to M = 7 whose words occur a few times in each document (BM25 retrieved them).
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from es_rerank.cli_options import json_out_option
from es_rerank.machine import machine_description
from worker.model import VARIANTS, Checkpoint, DeltaConfig, DeltaModel
from worker.scorer import LAYOUTS, DeltaScorer, resolve_device

UNK_ROW = 1  # row 0 is PAD, row 1 the UNK vector in the synthetic tables


# -- synthetic data (also used by the tests) -------------------------------------------------


def random_embeddings(n_words: int, dim: int = 300, seed: int = 0) -> np.ndarray:
    """A word2vec-like float32 table: row 0 PAD (zeros), row 1 UNK ~ U[-0.25, 0.25]."""
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((n_words, dim), dtype=np.float32)
    table *= rng.uniform(0.1, 0.3, size=(n_words, 1)).astype(np.float32)  # norms ~2-5
    table[0] = 0.0
    if n_words > UNK_ROW:
        table[UNK_ROW] = rng.uniform(-0.25, 0.25, dim).astype(np.float32)
    return table


@dataclass
class Batch:
    """One query's reranking window."""

    query_rows: np.ndarray  # int64 [M]
    doc_rows: np.ndarray  # int64 [n, N]
    lex: np.ndarray  # float32 [n, n_lex] raw Lex features


def realistic_batch(
    n_words: int,
    n_docs: int = 500,
    doc_len: int = 50,
    query_len: int = 7,
    seed: int = 0,
    unk_rate: float = 0.03,
    n_lex: int = 3,
) -> Batch:
    """A BM25-window-like batch over embedding rows 2..n_words-1 (see the module docstring)."""
    rng = np.random.default_rng(seed)
    first = UNK_ROW + 1
    n_real = n_words - first
    # Zipf-Mandelbrot word frequencies, ranks mapped to rows at random.
    ranks = np.arange(1, n_real + 1, dtype=np.float64)
    p = 1.0 / (ranks + 2.7)
    p /= p.sum()
    row_of_rank = rng.permutation(n_real) + first
    docs = row_of_rank[rng.choice(n_real, size=(n_docs, doc_len), p=p)]
    docs[rng.random((n_docs, doc_len)) < unk_rate] = UNK_ROW
    # Query: 2-5 distinct mid-frequency words.
    q_words = row_of_rank[rng.choice(np.arange(50, min(5000, n_real)), size=rng.integers(2, 6), replace=False)]
    query = np.zeros(query_len, np.int64)
    query[: min(len(q_words), query_len)] = q_words[:query_len]
    # Each document mentions 1-4 query words (BM25 retrieved it).
    for i in range(n_docs):
        hits = rng.integers(1, 5)
        docs[i, rng.integers(0, doc_len, hits)] = rng.choice(q_words, hits)
    # 90% full documents, the rest 5..N-1 tokens, right-padded.
    lengths = np.where(rng.random(n_docs) < 0.9, doc_len, rng.integers(5, doc_len, n_docs))
    docs[np.arange(doc_len)[None, :] >= lengths[:, None]] = 0
    # Lex: a BM25-like score, then proportions in [0, 1] (Jaccard, overlap, ...)
    lex = np.concatenate([rng.gamma(4.0, 3.0, (n_docs, 1)), rng.beta(2, 4, (n_docs, max(0, n_lex - 1)))], axis=1)[
        :, :n_lex
    ].astype(np.float32)
    return Batch(query, docs.astype(np.int64), lex)


def random_model(
    embeddings: np.ndarray, variant: str = "delta-32-lex3", seed: int = 0, gain: float = 1.0
) -> DeltaModel:
    """An untrained model in eval mode; ``gain`` > 1 scales the weights up (wider score spread)."""
    torch.manual_seed(seed)
    config = DeltaConfig(embedding_dim=embeddings.shape[1], **VARIANTS[variant])
    model = DeltaModel(config, embeddings)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if gain != 1.0 and name.endswith("weight"):
                param.mul_(gain)
        if config.lex_names:
            model.lex_mean.copy_(torch.tensor([12.0, 0.3, 0.4])[: len(config.lex_names)])
            model.lex_std.copy_(torch.tensor([6.0, 0.15, 0.2])[: len(config.lex_names)])
    return model.eval()


# -- measurement ----------------------------------------------------------------------------


def rss_mb() -> tuple[float, float]:
    """(current VmRSS, peak maxrss) of this process in MB."""
    current = float("nan")
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                current = int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    return current, peak


def device_name(device: torch.device) -> str:
    """GPU name, or the CPU model and usable cores (es_rerank.machine, as every report prints)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return machine_description()


def time_ms(fn: Callable[[], object], reps: int, warmup: int, device: torch.device) -> list[float]:
    """Wall times in ms of ``fn`` after ``warmup`` calls (synchronising CUDA)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile of ``values``."""
    return float(np.percentile(values, q))


def _trained_model(checkpoint: Path, embeddings_path: Path) -> DeltaModel:
    """The checkpoint's model on its vectors: an embeddings artifact (whose version must be the one the
    checkpoint was trained on), a folder holding ``vectors.npy``, or a ``.npy`` table."""
    from es_rerank.embeddings import Embeddings, EmbeddingsError

    fail = f"cannot benchmark {checkpoint} on {embeddings_path}"
    try:
        saved = Checkpoint.load(checkpoint)
        if (embeddings_path / "meta.json").is_file():
            embeddings = Embeddings.load(embeddings_path)
            if embeddings.version != saved.embeddings_version:
                raise click.ClickException(
                    f"{fail}: the checkpoint was trained on embeddings "
                    f"{saved.embeddings_version}, the folder holds {embeddings.version}; "
                    "pass that version's folder"
                )
            vectors = np.asarray(embeddings.vectors)
        else:
            npy = embeddings_path / "vectors.npy" if embeddings_path.is_dir() else embeddings_path
            try:
                vectors = np.load(npy)
            except (ValueError, EOFError):  # numpy's own text suggests allow_pickle: unsafe advice here
                raise click.ClickException(
                    f"{fail}: {npy} is not a .npy table (damaged, or not written by "
                    "numpy.save); pass the embeddings folder the checkpoint was trained "
                    "on"
                ) from None
        return saved.build_model(vectors)
    except (OSError, RuntimeError, ValueError, EmbeddingsError) as error:  # damaged files, a table of another size
        raise click.ClickException(f"{fail}: {error}") from None


def bench_vocab(
    n_words: int,
    *,
    n_docs: int,
    reps: int,
    ref_reps: int,
    warmup: int,
    device: torch.device,
    batch_queries: int,
    variant: str,
    checkpoint: Path | None,
    embeddings_path: Path | None,
    seed: int,
    layout: str | None = None,
    cuda_graphs: bool | None = None,
) -> dict:
    """One row of the table: reference vs fast on the same inputs for one vocabulary size."""
    if checkpoint is not None and embeddings_path is not None:  # the command takes both or neither
        model = _trained_model(checkpoint, embeddings_path)
        source = f"trained {checkpoint.name}, real vectors {embeddings_path} (synthetic Zipf documents over its rows)"
        n_words = model.embeddings.shape[0]
    else:
        model = random_model(random_embeddings(n_words, seed=seed), variant, seed=seed, gain=3.0)
        source = f"random weights ({variant}), random vectors"
    config = model.config
    n_lex = len(config.lex_names)
    batches = [
        realistic_batch(n_words, n_docs, config.doc_len, config.query_len, seed=seed + i, n_lex=n_lex)
        for i in range(max(1, batch_queries))
    ]
    batch = batches[0]
    lex = batch.lex if n_lex else None

    load_start = time.perf_counter()
    scorer = DeltaScorer(model, device, layout=layout, cuda_graphs=cuda_graphs)
    load_s = time.perf_counter() - load_start

    ref_model = model.to(device)
    docs_t = torch.from_numpy(batch.doc_rows).to(device)
    query_t = torch.from_numpy(batch.query_rows).to(device)[None, :].expand(n_docs, -1)
    lex_t = torch.from_numpy(lex).to(device) if lex is not None else None

    def reference_scores(docs: torch.Tensor, queries: torch.Tensor, lex: torch.Tensor | None) -> np.ndarray:
        # cuDNN convolutions default to TF32 on a GPU (errors ~1e-3): the reference stays fp32.
        with torch.inference_mode(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            return ref_model(docs, queries, lex).cpu().numpy()

    def reference() -> np.ndarray:
        return reference_scores(docs_t, query_t, lex_t)

    def fast() -> np.ndarray:
        return scorer.score(batch.query_rows, batch.doc_rows, lex)

    fast_times = time_ms(fast, reps, max(3, warmup), device)
    scorer_rss, _ = rss_mb()  # model + scorer, before the reference allocates anything
    expected = reference()
    max_diff = float(np.abs(expected - fast()).max())
    ref_times = time_ms(reference, ref_reps, 1, device)
    row: dict[str, Any] = {
        "vocab": n_words,
        "docs": n_docs,
        "source": source,
        "layout": scorer.layout,
        "query_len": config.query_len,
        "doc_len": config.doc_len,
        "embedding_dim": config.embedding_dim,
        "cuda_graphs": scorer.cuda_graphs,
        "load_s": round(load_s, 3),
        "distinct_doc_words": int(len(np.unique(batch.doc_rows))),
        "max_abs_diff": max_diff,
        "score_std": float(expected.std()),
        "scorer_rss_mb": scorer_rss,
        "ref_p50_ms": percentile(ref_times, 50),
        "ref_p99_ms": percentile(ref_times, 99),
        "fast_p50_ms": percentile(fast_times, 50),
        "fast_p99_ms": percentile(fast_times, 99),
    }
    row["speedup"] = row["ref_p50_ms"] / row["fast_p50_ms"]
    row["docs_per_s"] = n_docs / row["fast_p50_ms"] * 1e3
    if batch_queries > 1:
        requests = [(b.query_rows, b.doc_rows, b.lex if n_lex else None) for b in batches]
        many_times = time_ms(lambda: scorer.score_many(requests), max(5, reps // 2), 2, device)
        # The reference scores a batch too: every document carries its own query.
        all_docs = torch.from_numpy(np.concatenate([b.doc_rows for b in batches])).to(device)
        all_queries = torch.from_numpy(
            np.concatenate([np.broadcast_to(b.query_rows, (len(b.doc_rows), len(b.query_rows))) for b in batches])
        ).to(device)
        all_lex = torch.from_numpy(np.concatenate([b.lex for b in batches])).to(device) if n_lex else None
        ref_many_times = time_ms(
            lambda: reference_scores(all_docs, all_queries, all_lex), max(3, ref_reps // 4), 1, device
        )
        row["batch_queries"] = batch_queries
        row["ref_batch_p50_ms"] = percentile(ref_many_times, 50)
        row["batch_p50_ms"] = percentile(many_times, 50)
        row["batch_ms_per_query"] = row["batch_p50_ms"] / batch_queries
        row["queries_per_s"] = batch_queries / row["batch_p50_ms"] * 1e3
    row["rss_mb"], row["maxrss_mb"] = rss_mb()
    return row  # the model, the scorer and their tensors go with this frame


# GoogleNews word2vec's 3M words: 3.6 GB of float32 vectors, the largest table worth timing.
MAX_BENCH_VOCAB = 3_000_000


def _vocab_sizes(option: str) -> list[int]:
    """``--vocab-sizes`` as integers of at least 100 (the synthetic queries draw words from rank 50 on)."""
    try:
        sizes = [int(s) for s in option.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 100 or max(sizes) > MAX_BENCH_VOCAB:
        raise click.BadParameter(
            f"{option!r}: expected comma-separated vocabulary sizes from 100 to "
            f"{MAX_BENCH_VOCAB:,} (e.g. 33000,200000)",
            param_hint="--vocab-sizes",
        )
    return sizes


@click.command("score")
@click.option(
    "--vocab-sizes",
    default="33000,200000",
    show_default=True,
    help="Comma-separated vocabulary sizes (ignored with --checkpoint).",
)
@click.option(
    "--docs", "n_docs", default=500, show_default=True, type=click.IntRange(min=1), help="Documents per query."
)
@click.option(
    "--reps", default=50, show_default=True, type=click.IntRange(min=1), help="Timed repetitions of the fast scorer."
)
@click.option(
    "--ref-reps",
    type=click.IntRange(min=1),
    default=None,
    help="Timed repetitions of the reference forward [default: reps/5, at least 5].",
)
@click.option("--warmup", default=5, show_default=True, type=click.IntRange(min=0))
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: CUDA if available).")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="torch.set_num_threads (default: torch's).")
@click.option(
    "--batch-queries",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Also time Q queries x docs in one score_many call (queries/s).",
)
@click.option(
    "--variant",
    type=click.Choice(sorted(VARIANTS)),
    default="delta-32-lex3",
    show_default=True,
    help="Model variant with random weights.",
)
@click.option(
    "--checkpoint",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A trained checkpoint (else random weights and vectors).",
)
@click.option(
    "--embeddings",
    "embeddings_path",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="The embeddings of --checkpoint: a .npy table or an artifact directory holding vectors.npy.",
)
@click.option(
    "--layout",
    type=click.Choice(LAYOUTS),
    default=None,
    help="The fast scorer's layout (default: sparse on the CPU, dense on a GPU).",
)
@click.option(
    "--cuda-graphs/--no-cuda-graphs",
    default=None,
    help="Replay the dense layout as CUDA graphs (default: on with the dense layout on a GPU).",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=click.IntRange(0, 2**32 - 1),
    help="Seed of the random weights, vectors and inputs.",
)
@json_out_option("Also write the rows as JSON.")
def bench_score(
    vocab_sizes: str,
    n_docs: int,
    reps: int,
    ref_reps: int | None,
    warmup: int,
    device: str | None,
    threads: int | None,
    batch_queries: int,
    variant: str,
    checkpoint: Path | None,
    embeddings_path: Path | None,
    seed: int,
    layout: str | None,
    cuda_graphs: bool | None,
    json_out: Path | None,
) -> None:
    """Latency of the reference forward vs the fast DeltaScorer on one query's 500 documents."""
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        dev = resolve_device(device or None)
    except RuntimeError:
        raise click.BadParameter(
            f"{device!r} is not a torch device; use cpu, cuda or cuda:N", param_hint="--device"
        ) from None
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--device") from None
    if cuda_graphs and (dev.type != "cuda" or layout == "sparse"):
        raise click.BadParameter(
            "CUDA graphs replay the dense layout on a GPU; use --device cuda without "
            "--layout sparse, or drop --cuda-graphs",
            param_hint="--cuda-graphs",
        )
    if (checkpoint is None) != (embeddings_path is None):
        raise click.UsageError(
            "--checkpoint and --embeddings (the .npy table it was trained with) go together; "
            "pass both, or neither for random weights and vectors"
        )
    ref_reps = max(5, reps // 5) if ref_reps is None else ref_reps
    sizes = [0] if checkpoint is not None else _vocab_sizes(vocab_sizes)
    header = {
        "device": device_name(dev),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "load_avg_1min": os.getloadavg()[0],
    }
    click.echo(
        f"device: {header['device']} | torch {header['torch']} | threads {header['threads']}"
        f" | OMP_WAIT_POLICY={header['omp_wait_policy'] or '(default)'}"
        f" | load avg {header['load_avg_1min']:.2f}"
    )
    rows = []
    for n_words in sizes:
        rows.append(
            bench_vocab(
                n_words,
                n_docs=n_docs,
                reps=reps,
                ref_reps=ref_reps,
                warmup=warmup,
                device=dev,
                batch_queries=batch_queries,
                variant=variant,
                checkpoint=checkpoint,
                embeddings_path=embeddings_path,
                seed=seed,
                layout=layout,
                cuda_graphs=cuda_graphs,
            )
        )
    click.echo(
        f"inputs: {rows[0]['source']}; {n_docs} docs, M={rows[0]['query_len']}, N={rows[0]['doc_len']}, "
        f"V={rows[0]['embedding_dim']}; layout {rows[0]['layout']}"
        f"{' (CUDA graphs)' if rows[0]['cuda_graphs'] else ''}; "
        f"fast reps {reps}, reference reps {ref_reps}"
    )
    cols = [
        ("vocab", "{:>7}", "vocab"),
        ("distinct", "{:>8}", "distinct_doc_words"),
        ("ref p50", "{:>8.1f}", "ref_p50_ms"),
        ("ref p99", "{:>8.1f}", "ref_p99_ms"),
        ("fast p50", "{:>8.2f}", "fast_p50_ms"),
        ("fast p99", "{:>8.2f}", "fast_p99_ms"),
        ("ref/fast", "{:>8.1f}", "speedup"),
        ("docs/s", "{:>8.0f}", "docs_per_s"),
        ("max|diff|", "{:>9.1e}", "max_abs_diff"),
        ("load s", "{:>6.2f}", "load_s"),
        ("RSS fast", "{:>8.0f}", "scorer_rss_mb"),
        ("RSS end", "{:>7.0f}", "rss_mb"),
        ("maxRSS", "{:>7.0f}", "maxrss_mb"),
    ]
    if batch_queries > 1:
        cols += [
            (f"ref {batch_queries}q", "{:>8.1f}", "ref_batch_p50_ms"),
            (f"{batch_queries}q p50", "{:>8.1f}", "batch_p50_ms"),
            ("ms/q", "{:>6.2f}", "batch_ms_per_query"),
            ("q/s", "{:>6.1f}", "queries_per_s"),
        ]
    click.echo("  ".join(f"{name:>{len(fmt.format(rows[0][key]))}}" for name, fmt, key in cols))
    for row in rows:
        click.echo("  ".join(fmt.format(row[key]) for _, fmt, key in cols))
    click.echo(
        "times in ms; RSS in MB: VmRSS after the fast runs (model + scorer) and at the end of "
        "the row (+ reference), maxRSS = peak of the process so far"
    )
    if json_out is not None:
        json_out.write_text(json.dumps({**header, "rows": rows}, indent=2))


if __name__ == "__main__":
    bench_score()
