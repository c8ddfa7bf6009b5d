"""DeltaScorer gives DeltaModel.forward's scores (eval mode) on every variant and edge case."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.score import UNK_ROW, random_embeddings, random_model, realistic_batch
from worker.model import PAD_ID, VARIANTS, DeltaConfig, DeltaModel
from worker.score_layouts import DenseBatch
from worker.scorer import LAYOUTS, DeltaScorer

TOL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is as fast and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)  # max abs difference allowed (observed ~1e-6)


N_WORDS = 3000


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    vectors = random_embeddings(N_WORDS, seed=11)
    vectors[7] = vectors[8]  # two rows with the same vector (a tie the exact distance must handle)
    return vectors


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request, table: np.ndarray) -> DeltaModel:
    return random_model(table, request.param, seed=1, gain=3.0)


@pytest.fixture(scope="module", params=LAYOUTS)
def scorer(request, model: DeltaModel) -> DeltaScorer:
    """Both layouts on the CPU: the sparse one served there, the dense one a GPU serves."""
    return DeltaScorer(model, torch.device("cpu"), layout=request.param)


def reference(model: DeltaModel, query: np.ndarray, docs: np.ndarray, lex: np.ndarray | None) -> np.ndarray:
    n = docs.shape[0]
    query = query if query.size else np.zeros(1, np.int64)
    with torch.no_grad():
        return model(
            torch.as_tensor(docs),
            torch.as_tensor(query)[None, :].expand(n, -1),
            None if lex is None else torch.as_tensor(lex),
        ).numpy()


def lex_for(model: DeltaModel, n: int, seed: int = 0) -> np.ndarray | None:
    if not model.config.lex_names:
        return None
    rng = np.random.default_rng(seed)
    return np.stack([rng.gamma(4, 3, n), rng.random(n), rng.random(n)], axis=1).astype(np.float32)


def check(
    model: DeltaModel, scorer: DeltaScorer, query: np.ndarray, docs: np.ndarray, lex: np.ndarray | None = None
) -> np.ndarray:
    lex = lex_for(model, docs.shape[0]) if lex is None else lex
    expected = reference(model, query, docs, lex)
    got = scorer.score(query, docs, lex)
    assert got.dtype == np.float32 and got.shape == (docs.shape[0],)
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
    return expected


def test_random_inputs(model: DeltaModel, scorer: DeltaScorer) -> None:
    rng = np.random.default_rng(0)
    docs = rng.integers(0, N_WORDS, (64, 50))  # PADs anywhere, UNK row included
    query = rng.integers(1, N_WORDS, 7)
    expected = check(model, scorer, query, docs)
    assert expected.std() > 1e-2, "scores too flat for the tolerance to mean anything"


def test_realistic_batch(model: DeltaModel, scorer: DeltaScorer) -> None:
    batch = realistic_batch(N_WORDS, n_docs=120, seed=4)
    assert (batch.doc_rows == PAD_ID).any() and (batch.doc_rows == UNK_ROW).any()
    lex = batch.lex if model.config.lex_names else None
    check(model, scorer, batch.query_rows, batch.doc_rows, lex)


def test_edge_cases(model: DeltaModel, scorer: DeltaScorer) -> None:
    rng = np.random.default_rng(1)
    docs = rng.integers(2, N_WORDS, (12, 50))
    docs[0, 1:] = PAD_ID  # one token
    docs[1, :] = PAD_ID  # all padding
    docs[2, 30:] = PAD_ID  # short
    docs[3, :] = 17  # one word repeated
    docs[4, ::2] = 23  # query word every other position
    docs[5, 10:15] = PAD_ID  # PAD inside the document
    docs[6, :] = UNK_ROW  # unknown words
    docs[7, :10] = 8  # same vector as query word 7, another row
    docs[8, -1] = 23  # match in the last position
    docs[9, 0] = 23  # match in the first position
    queries = [
        np.array([23, 17, 0, 0, 0, 0, 0]),
        np.array([0, 23, 0, 17, 0, 7, 0]),  # PAD inside the query
        np.array([23, 23, 17, 0, 0, 0, 0]),  # repeated query word
        np.array([UNK_ROW, 23, 0, 0, 0, 0, 0]),
        np.array([7, 0, 0, 0, 0, 0, 0]),
        np.zeros(7, np.int64),  # empty query (all PAD)
        np.array([23, 17, 5, 9, 11, 13, 19]),  # full query
        np.array([23, 17]),  # shorter M
        np.array([], np.int64),  # no tokens at all: same as one PAD
    ]
    for query in queries:
        check(model, scorer, query, docs)


def test_other_doc_lengths(model: DeltaModel, scorer: DeltaScorer) -> None:
    rng = np.random.default_rng(2)
    for width in (1, 3, 20, 64):
        docs = rng.integers(0, N_WORDS, (9, width))
        check(model, scorer, np.array([5, 6, 7, 0, 0, 0, 0]), docs)
    docs = rng.integers(1, N_WORDS, (5, 50))
    docs[:, 40:] = PAD_ID  # every document ends early: trailing columns are dropped
    check(model, scorer, np.array([5, 6, 0, 0, 0, 0, 0]), docs)


def test_no_documents(model: DeltaModel, scorer: DeltaScorer) -> None:
    lex = lex_for(model, 0)
    out = scorer.score(np.array([5, 6, 0]), np.zeros((0, 50), np.int64), lex)
    assert out.shape == (0,) and out.dtype == np.float32


def test_score_many_equals_score(model: DeltaModel, scorer: DeltaScorer) -> None:
    requests = []
    for i, (n, width) in enumerate([(40, 50), (1, 50), (0, 50), (25, 30), (60, 50)]):
        batch = realistic_batch(N_WORDS, n_docs=max(n, 1), doc_len=width, seed=20 + i)
        docs = batch.doc_rows[:n]
        requests.append((batch.query_rows, docs, lex_for(model, n, seed=i)))
    many = scorer.score_many(requests)
    assert [len(s) for s in many] == [40, 1, 0, 25, 60]
    for (query, docs, lex), got in zip(requests, many):
        np.testing.assert_allclose(got, scorer.score(query, docs, lex), atol=1e-5, rtol=1e-6)
        np.testing.assert_allclose(got, reference(model, query, docs, lex), atol=TOL, rtol=0)
    assert scorer.score_many([]) == []


@pytest.mark.slow
def test_score_many_groups(model: DeltaModel, scorer: DeltaScorer) -> None:
    """Requests go through in groups (~512 documents on the CPU): same scores as one pass."""
    requests = []
    for i, n in enumerate([200, 200, 200, 600, 3]):
        batch = realistic_batch(N_WORDS, n_docs=n, seed=40 + i)
        requests.append((batch.query_rows, batch.doc_rows, lex_for(model, n, seed=i)))
    grouped = scorer.score_many(requests)
    one_pass = DeltaScorer(model, torch.device("cpu"), layout=scorer.layout)
    one_pass.group_docs = 10_000  # everything in one forward pass
    for got, single, (query, docs, lex) in zip(grouped, one_pass.score_many(requests), requests):
        np.testing.assert_allclose(got, single, atol=1e-5, rtol=1e-6)
        np.testing.assert_allclose(got, reference(model, query, docs, lex), atol=TOL, rtol=0)


def test_layout_choice(model: DeltaModel) -> None:
    assert DeltaScorer.from_model(model, "cpu").layout == "sparse"
    with pytest.raises(ValueError, match="layout 'packed'"):
        DeltaScorer(model, torch.device("cpu"), layout="packed")
    assert not DeltaScorer(model, torch.device("cpu"), layout="dense").cuda_graphs
    with pytest.raises(ValueError, match="cuda_graphs needs"):
        DeltaScorer(model, torch.device("cpu"), layout="dense", cuda_graphs=True)


def test_dense_buckets_are_exact(model: DeltaModel) -> None:
    """Padding requests, documents and width up to a CUDA graph's shape changes no score."""
    scorer = DeltaScorer(model, torch.device("cpu"), layout="dense")
    requests = []
    for i, (n, width) in enumerate([(30, 50), (7, 20), (45, 50)]):
        batch = realistic_batch(N_WORDS, n_docs=n, doc_len=width, seed=60 + i)
        requests.append(scorer._check(i, batch.query_rows[: 3 + i], batch.doc_rows, lex_for(model, n, seed=i)))
    plain = DenseBatch.build(requests, 7)
    padded = DenseBatch.build(requests, 7, bucket_width=50)
    assert plain.ids.shape == (3, 45, 50) and padded.ids.shape == (4, 128, 50)
    with torch.inference_mode():
        got = scorer._dense_scores(*map(torch.from_numpy, padded.arrays))[:3, :45]
        expected = scorer._dense_scores(*map(torch.from_numpy, plain.arrays))
    sizes = torch.arange(45)[None, :] < torch.tensor([30, 7, 45])[:, None]
    torch.testing.assert_close(got[sizes], expected[sizes], atol=1e-5, rtol=1e-6)


def test_model_in_train_mode_scores_as_eval(table: np.ndarray) -> None:
    model = random_model(table, "delta-32-lex3", gain=3.0)
    model.train()
    scorer = DeltaScorer.from_model(model, "cpu")
    assert model.training  # from_model leaves the model alone
    batch = realistic_batch(N_WORDS, n_docs=30, seed=3)
    model.eval()
    check(model, scorer, batch.query_rows, batch.doc_rows, batch.lex)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_other_architecture(table: np.ndarray) -> None:
    """Kernel width 5 (two gap rows), 2 conv layers, 8 filters, one hidden layer."""
    torch.manual_seed(0)
    for width in (5, 2):
        config = DeltaConfig(kernel_width=width, n_conv=2, n_filters=8, hidden=(4,), lex_names=("abstract_bm25",))
        model = DeltaModel(config, table).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(3.0)
        scorer = DeltaScorer.from_model(model, "cpu")
        rng = np.random.default_rng(width)
        docs = rng.integers(0, N_WORDS, (20, 50))
        docs[3, 4:] = PAD_ID
        lex = rng.random((20, 1)).astype(np.float32)
        check(model, scorer, np.array([4, 9, 0]), docs, lex)


def test_input_validation(table: np.ndarray) -> None:
    lex_scorer = DeltaScorer.from_model(random_model(table, "delta-32-lex3"), "cpu")
    docs = np.ones((2, 50), np.int64)
    with pytest.raises(ValueError, match="Lex features"):
        lex_scorer.score(np.array([3]), docs, None)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        lex_scorer.score(np.array([3]), docs, np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="outside"):
        lex_scorer.score(np.array([N_WORDS]), docs, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="outside"):
        lex_scorer.score(np.array([3]), -docs, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        lex_scorer.score(np.array([3]), np.ones(50, np.int64), np.zeros((1, 3), np.float32))
    plain = DeltaScorer.from_model(random_model(table, "delta-32"), "cpu")
    with pytest.raises(ValueError, match="lex=None"):
        plain.score(np.array([3]), docs, np.zeros((2, 3), np.float32))
    # int32 ids and float64 Lex are accepted
    out = lex_scorer.score(np.array([3, 4], np.int32), docs.astype(np.int32), np.zeros((2, 3)))
    assert out.shape == (2,)


def test_device_selection(table: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    model = random_model(table, "delta-32")
    assert DeltaScorer.from_model(model, "cpu").device == torch.device("cpu")
    assert DeltaScorer.from_model(model, torch.device("cpu")).device == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert DeltaScorer.from_model(model).device == torch.device("cpu")
    with pytest.raises(ValueError, match="CUDA is not available"):
        DeltaScorer.from_model(model, "cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"cuda:2 requested but this machine has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        DeltaScorer.from_model(model, "cuda:2")


def test_embeddings_shared_not_copied(table: np.ndarray) -> None:
    model = random_model(table, "delta-32")
    scorer = DeltaScorer.from_model(model, "cpu")
    assert scorer.embeddings.data_ptr() == model.embeddings.data_ptr()


def test_large_vocabulary() -> None:
    """A 200k-word table: ids anywhere in it, few documents (the table build is the cost)."""
    n_words = 200_000
    vectors = random_embeddings(n_words, seed=5)
    model = random_model(vectors, "delta-32-lex3", gain=3.0)
    scorer = DeltaScorer.from_model(model, "cpu")
    assert scorer.table.shape == (n_words, 96) and scorer.table.dtype == torch.float32
    rng = np.random.default_rng(0)
    docs = rng.integers(0, n_words, (16, 50))
    docs[:, :3] = n_words - 1
    query = np.array([n_words - 1, 150_000, 3, 0, 0, 0, 0])
    check(model, scorer, query, docs, lex_for(model, 16))
    batch = realistic_batch(n_words, n_docs=40, seed=1)
    check(model, scorer, batch.query_rows, batch.doc_rows, batch.lex)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_graphs_match_reference(table: np.ndarray) -> None:
    """CUDA-graph replays (the GPU default) score like the reference on every shape, and few
    shapes are captured: requests are bucketed."""
    model = random_model(table, "delta-32-lex3", seed=3, gain=3.0)
    scorer = DeltaScorer.from_model(model, "cuda")
    assert scorer.cuda_graphs
    for n_requests, n_docs in [(1, 500), (1, 470), (3, 200), (1, 1), (2, 500), (1, 500)]:
        requests = []
        for i in range(n_requests):
            batch = realistic_batch(N_WORDS, n_docs=n_docs, seed=100 * n_requests + n_docs + i)
            requests.append((batch.query_rows, batch.doc_rows, batch.lex))
        for got, (query, docs, lex) in zip(scorer.score_many(requests), requests):
            np.testing.assert_allclose(got, reference(model, query, docs, lex), atol=TOL, rtol=0)
    assert len(scorer._graphs) == 4  # 1x512 (twice), 4x256, 1x128, 2x512


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gpu_matches_cpu_reference(table: np.ndarray, variant: str, layout: str) -> None:
    model = random_model(table, variant, seed=2, gain=3.0)
    scorer = DeltaScorer(model, torch.device("cuda"), layout=layout, cuda_graphs=False)  # eager kernels
    assert DeltaScorer.from_model(model, "cuda").layout == "dense"
    batch = realistic_batch(N_WORDS, n_docs=500, seed=6)
    lex = batch.lex if model.config.lex_names else None
    expected = reference(model, batch.query_rows, batch.doc_rows, lex)  # the model stays on the CPU
    got = scorer.score(batch.query_rows, batch.doc_rows, lex)
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
    many = scorer.score_many(
        [
            (batch.query_rows, batch.doc_rows, lex),
            (np.zeros(7, np.int64), batch.doc_rows[:7], None if lex is None else lex[:7]),
        ]
    )
    np.testing.assert_allclose(many[0], expected, atol=TOL, rtol=0)
    np.testing.assert_allclose(
        many[1],
        reference(model, np.zeros(7, np.int64), batch.doc_rows[:7], None if lex is None else lex[:7]),
        atol=TOL,
        rtol=0,
    )


def test_bench_command(tmp_path, table: np.ndarray) -> None:
    """`esrr bench score` runs end to end on tiny sizes, with random and with trained weights."""
    import json

    from click.testing import CliRunner

    from benchmarks.score import bench_score
    from worker.model import Checkpoint

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        bench_score,
        [
            "--vocab-sizes",
            "500,800",
            "--docs",
            "30",
            "--reps",
            "3",
            "--ref-reps",
            "2",
            "--warmup",
            "1",
            "--batch-queries",
            "2",
            "--device",
            "cpu",
            "--json-out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "random weights" in result.output and "ref/fast" in result.output and "layout sparse" in result.output
    rows = json.loads(out.read_text())["rows"]
    assert [r["vocab"] for r in rows] == [500, 800]
    assert all(r["max_abs_diff"] < TOL and r["queries_per_s"] > 0 for r in rows)

    model = random_model(table, "delta-32", gain=3.0)
    path = tmp_path / "m.pt"
    Checkpoint(model.config, model.state_dict(), "e", "s").save(path)
    np.save(tmp_path / "vectors.npy", table)
    result = CliRunner().invoke(
        bench_score,
        [
            "--checkpoint",
            str(path),
            "--embeddings",
            str(tmp_path),
            "--docs",
            "20",
            "--reps",
            "3",
            "--ref-reps",
            "2",
            "--device",
            "cpu",
            "--layout",
            "dense",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "trained m.pt" in result.output and "layout dense" in result.output

    artifact = tmp_path / "v2"  # an embeddings artifact of another version than the checkpoint's "e"
    artifact.mkdir()
    np.save(artifact / "vectors.npy", table)
    (artifact / "vocab.txt").write_text("\n".join(["<pad>", "<unk>", *(f"w{i}" for i in range(len(table) - 2))]))
    (artifact / "meta.json").write_text(json.dumps({"format": 1, "version": "v2"}))
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    for embeddings, message in [
        (artifact, "trained on embeddings e, the folder holds v2"),
        (tmp_path / "junk.npy", "is not a .npy table"),
    ]:
        bad = CliRunner().invoke(
            bench_score, ["--checkpoint", str(path), "--embeddings", str(embeddings), "--device", "cpu"]
        )
        assert bad.exit_code == 1 and message in bad.output and "allow_pickle" not in bad.output, bad.output

    for args in (
        ["--vocab-sizes", "abc"],
        ["--vocab-sizes", "50"],
        ["--vocab-sizes", "1000000000"],
        ["--device", "gpu"],
        ["--threads", "0"],
        ["--layout", "packed"],
        ["--cuda-graphs", "--device", "cpu"],
        ["--docs", "0"],
        ["--reps", "0"],
        ["--embeddings", str(tmp_path)],
    ):
        bad = CliRunner().invoke(bench_score, args)
        assert bad.exit_code == 2 and ("Invalid value" in bad.output or "pass both" in bad.output), (args, bad.output)
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    bad = CliRunner().invoke(bench_score, ["--checkpoint", str(tmp_path / "notes.pt"), "--embeddings", str(tmp_path)])
    assert bad.exit_code == 1 and "not a readable es-rerank checkpoint" in bad.output, bad.output
