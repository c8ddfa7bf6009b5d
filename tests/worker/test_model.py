"""The reference DeltaModel: shapes, masking, edge cases, checkpoints, config."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from worker.model import PAD_ID, VARIANTS, Checkpoint, CheckpointError, DeltaConfig, DeltaModel, delta_matrix

N_WORDS, DIM = 400, 300


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one intra-op thread is as fast and immune to a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    rng = np.random.default_rng(3)
    table = rng.normal(0.0, 0.3, (N_WORDS, DIM)).astype(np.float32)
    table[PAD_ID] = 0.0
    return table


def make_model(vectors: np.ndarray, variant: str, seed: int = 0) -> DeltaModel:
    torch.manual_seed(seed)
    model = DeltaModel(DeltaConfig(**VARIANTS[variant]), vectors)
    with torch.no_grad():  # larger weights than the default init: scores that differ visibly
        for name, param in model.named_parameters():
            if name.endswith("weight"):
                param.mul_(3.0)
    return model.eval()


def scores(model: DeltaModel, docs: np.ndarray, query: np.ndarray, lex: np.ndarray | None = None) -> np.ndarray:
    n = docs.shape[0]
    if model.config.lex_names and lex is None:
        lex = np.tile(np.array([[5.0, 0.2, 0.5]], np.float32), (n, 1))
    with torch.no_grad():
        out = model(
            torch.as_tensor(docs),
            torch.as_tensor(query)[None, :].expand(n, -1),
            None if lex is None else torch.as_tensor(lex),
        )
    return out.numpy()


def docs_with_lengths(lengths: list[int], width: int = 50, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    docs = rng.integers(1, N_WORDS, (len(lengths), width))
    docs[np.arange(width)[None, :] >= np.asarray(lengths)[:, None]] = PAD_ID
    return docs


QUERY = np.array([11, 23, 5, 0, 0, 0, 0])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_shapes(vectors: np.ndarray, variant: str) -> None:
    model = make_model(vectors, variant)
    config = model.config
    docs = docs_with_lengths([50, 30, 1])
    doc, query = model.embeddings[torch.as_tensor(docs)], model.embeddings[torch.as_tensor(QUERY)]
    doc_ids, query_ids = torch.as_tensor(docs), torch.as_tensor(QUERY)[None].expand(3, -1)
    delta = delta_matrix(doc, query[None].expand(3, -1, -1), doc_ids != PAD_ID, query_ids != PAD_ID, config)
    assert delta.shape == (3, 50, config.delta_width)
    expected_width = {
        "delta-32": 303,
        "delta-32-lex3": 303,
        "delta-32-lex3-window": 303,
        "delta-32-no-difference": 3,
        "delta-32-no-delta-features": 300,
    }[variant]
    assert config.delta_width == expected_width
    assert [c.in_channels for c in model.convs] == [expected_width, 32, 32]
    assert model.dense[0].in_features == 32 + len(config.lex_names)
    assert [layer.out_features for layer in model.dense] == [32, 16, 1]
    out = scores(model, docs, QUERY)
    assert out.shape == (3,) and out.dtype == np.float32 and np.isfinite(out).all()


def test_delta_matrix_values(vectors: np.ndarray) -> None:
    """Closest query word, difference and the three features of section 3.2, by hand."""
    config = DeltaConfig()
    doc_ids = torch.tensor([[7, 23, 0]])
    query_ids = torch.tensor([[11, 0, 23]])  # PAD in the middle is ignored
    e = torch.as_tensor(vectors)
    delta = delta_matrix(e[doc_ids], e[query_ids], doc_ids != 0, query_ids != 0, config)[0]
    d = e[7]
    dist = {q: float((d - e[q]).norm()) for q in (11, 23)}
    q = e[min(dist, key=dist.get)]
    torch.testing.assert_close(delta[0, :300], d - q)
    cosine = float(d @ q / (d.norm() * q.norm()))
    distance = float((d - q).norm())
    proximity = 1 - distance / float(d.norm() + q.norm())
    torch.testing.assert_close(delta[0, 300:], torch.tensor([cosine, distance, proximity]))
    # an exact match: zero difference, cosine 1, distance 0, proximity 1
    torch.testing.assert_close(
        delta[1], torch.cat([torch.zeros(300), torch.tensor([1.0, 0.0, 1.0])]), atol=1e-5, rtol=0
    )
    assert torch.all(delta[2] == 0)  # padding zeroed


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_padding_invariance(vectors: np.ndarray, variant: str) -> None:
    """Extra right padding, fewer padded columns, PAD inside the query: same scores."""
    model = make_model(vectors, variant)
    docs = docs_with_lengths([50, 20, 7, 33])
    base = scores(model, docs, QUERY)
    wider = np.concatenate([docs, np.zeros((4, 10), np.int64)], axis=1)
    np.testing.assert_allclose(scores(model, wider, QUERY), base, atol=1e-5, rtol=0)
    short = docs_with_lengths([20, 7], seed=5)
    np.testing.assert_allclose(scores(model, short[:, :20], QUERY), scores(model, short, QUERY), atol=1e-5, rtol=0)
    for query in (np.array([11, 23, 5]), np.array([0, 11, 0, 23, 0, 5, 0]), np.array([11, 23, 5, 0])):
        np.testing.assert_allclose(scores(model, docs, query), base, atol=1e-5, rtol=0)


def test_padding_is_masked_not_just_zero(vectors: np.ndarray) -> None:
    """A PAD inside a document is masked: replacing it by a word changes the score."""
    model = make_model(vectors, "delta-32")
    docs = docs_with_lengths([50])
    holed = docs.copy()
    holed[0, 10] = PAD_ID
    assert abs(scores(model, holed, QUERY)[0] - scores(model, docs, QUERY)[0]) > 1e-6


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_empty_query_and_short_docs(vectors: np.ndarray, variant: str) -> None:
    model = make_model(vectors, variant)
    docs = docs_with_lengths([1, 2, 0, 50])
    for query in (QUERY, np.zeros(7, np.int64)):
        out = scores(model, docs, query)
        assert np.isfinite(out).all()
    # an all-padding document pools to 0: its score is the dense stack on zeros (+ Lex)
    lex = np.array([[5.0, 0.2, 0.5]], np.float32) if model.config.lex_names else None
    empty_doc = scores(model, np.zeros((1, 50), np.int64), QUERY, lex)[0]
    y = torch.zeros(1, 32)
    with torch.no_grad():
        if lex is not None:
            y = torch.cat([y, (torch.as_tensor(lex) - model.lex_mean) / model.lex_std], dim=1)
        for layer in model.dense:
            y = torch.nn.functional.leaky_relu(layer(y), 0.3)
    assert empty_doc == pytest.approx(float(y[0, 0]), abs=1e-6)


def test_eval_mode_is_deterministic_and_train_mode_uses_dropout(vectors: np.ndarray) -> None:
    model = make_model(vectors, "delta-32-lex3")
    docs = docs_with_lengths([50] * 8)
    np.testing.assert_array_equal(scores(model, docs, QUERY), scores(model, docs, QUERY))
    model.train()
    torch.manual_seed(1)
    a = scores(model, docs, QUERY)
    b = scores(model, docs, QUERY)
    model.eval()
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_config_roundtrip(variant: str) -> None:
    config = DeltaConfig(**VARIANTS[variant])
    data = asdict(config)
    data_as_json = {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}
    assert DeltaConfig.from_dict(data_as_json) == config
    assert DeltaConfig.from_dict(data) == config


@pytest.mark.parametrize("variant", ["delta-32", "delta-32-lex3"])
def test_checkpoint_roundtrip(tmp_path, vectors: np.ndarray, variant: str) -> None:
    model = make_model(vectors, variant)
    if model.config.lex_names:
        model.lex_mean.copy_(torch.tensor([4.0, 0.1, 0.3]))
        model.lex_std.copy_(torch.tensor([2.0, 0.5, 0.25]))
    path = tmp_path / "sub" / "model.pt"
    Checkpoint(model.config, model.state_dict(), "emb-v1", "stats-v1", {"ndcg@20": 0.31}).save(path)
    loaded = Checkpoint.load(path)
    assert loaded.config == model.config
    assert (loaded.embeddings_version, loaded.stats_version, loaded.metrics) == (
        "emb-v1",
        "stats-v1",
        {"ndcg@20": 0.31},
    )
    assert "embeddings" not in loaded.state_dict  # frozen vectors live in their own artifact
    rebuilt = loaded.build_model(vectors)
    assert not rebuilt.training
    docs = docs_with_lengths([50, 12, 3])
    lex = np.array([[8.0, 0.1, 0.9], [1.0, 0.0, 0.0], [3.0, 0.5, 0.5]], np.float32)
    np.testing.assert_array_equal(scores(rebuilt, docs, QUERY, lex), scores(model, docs, QUERY, lex))


def test_checkpoint_errors(tmp_path, vectors: np.ndarray) -> None:
    with pytest.raises(FileNotFoundError, match="esrr train"):
        Checkpoint.load(tmp_path / "missing.pt")
    model = make_model(vectors, "delta-32")
    path = tmp_path / "model.pt"
    Checkpoint(model.config, model.state_dict(), "e", "s").save(path)
    data = torch.load(path, weights_only=True)
    data["format"] = 99
    torch.save(data, path)
    with pytest.raises(ValueError, match="format 99"):
        Checkpoint.load(path)


@pytest.mark.parametrize(
    "content",
    [
        "text",
        "truncated",
        "empty",
        "list",
        "missing key",
        "unknown config key",
        "unknown lex feature",
        "query_len 0",
        "no embeddings version",
    ],
)
def test_a_damaged_checkpoint_is_a_checkpoint_error(tmp_path, vectors: np.ndarray, content: str) -> None:
    model = make_model(vectors, "delta-32")
    path = tmp_path / "model.pt"
    Checkpoint(model.config, model.state_dict(), "e", "s").save(path)
    data = torch.load(path, weights_only=True)
    if content == "text":
        path.write_text("not a checkpoint\n")
    elif content == "truncated":
        path.write_bytes(path.read_bytes()[:1000])
    elif content == "empty":
        path.write_bytes(b"")
    elif content == "list":
        torch.save([1, 2], path)
    elif content == "missing key":
        del data["metrics"]
        torch.save(data, path)
    else:
        if content == "unknown config key":
            data["config"]["colour"] = "blue"
        elif content == "unknown lex feature":
            data["config"]["lex_names"] = ["bogus_feature"]
        elif content == "query_len 0":
            data["config"]["query_len"] = 0
        else:
            data["embeddings_version"] = None
        torch.save(data, path)
    with pytest.raises(CheckpointError, match=r"not a readable es-rerank checkpoint.*esrr train"):
        Checkpoint.load(path)


def test_a_checkpoint_with_weights_that_are_not_numbers_is_refused(tmp_path, vectors: np.ndarray) -> None:
    model = make_model(vectors, "delta-32")
    state = model.state_dict()
    state["dense.1.weight"][0, 0] = float("nan")
    state["convs.0.bias"][3] = float("inf")
    path = tmp_path / "diverged.pt"
    Checkpoint(model.config, state, "e", "s").save(path)
    with pytest.raises(
        CheckpointError,
        match=r"diverged\.pt holds weights that are not finite numbers "
        r"\(convs\.0\.bias, dense\.1\.weight\).*esrr train",
    ):
        Checkpoint.load(path)


def test_checkpoint_save_replaces_the_file_whole(tmp_path, vectors: np.ndarray, monkeypatch) -> None:
    model = make_model(vectors, "delta-32")
    path = tmp_path / "model.pt"
    Checkpoint(model.config, model.state_dict(), "e", "s").save(path)
    before = path.read_bytes()

    def full_disk(obj, target) -> None:
        Path(target).write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc] . PytorchStreamWriter failed writing file")

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="cannot write the checkpoint"):
        Checkpoint(model.config, model.state_dict(), "e2", "s").save(path)
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]


def test_embedding_dim_mismatch(vectors: np.ndarray) -> None:
    with pytest.raises(ValueError, match="50 dimensions.*300"):
        DeltaModel(DeltaConfig(), np.zeros((10, 50), np.float32))
    model = make_model(vectors, "delta-32")
    checkpoint = Checkpoint(model.config, model.state_dict(), "e", "s")
    with pytest.raises(ValueError, match="dimensions"):
        checkpoint.build_model(np.zeros((N_WORDS, 100), np.float32))
