"""The artifact home of the worker and gateway tests: NFCorpus documents (or a fallback), a random-weight
Delta-32-Lex3 checkpoint on random embeddings, and homes with and without a served index.

Registered as a pytest plugin by the root conftest, so every room's tests share the same session fixtures.
"""

from __future__ import annotations

import itertools
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from es_rerank.backends.embedded import EmbeddedBackend
from es_rerank.lex import LEX3
from es_rerank.settings import DEFAULT_NFCORPUS
from es_rerank.stats import CorpusStats, Document, build_stats
from es_rerank.versions import write_pointer
from index_setup.embedded_index import build_embedded_index
from index_setup.readers import read_beir_corpus

STATS_VERSION = "v-test"
EMBEDDINGS_VERSION = "e-test"
DIM = 300

FALLBACK_DOCS = [  # used when the NFCorpus file of ../shared/data is not there (CI without data)
    ("D1", "Statin use and breast cancer survival", "Statins may delay breast cancer recurrence in 2005 cohorts."),
    (
        "D2",
        "Vitamin D and colorectal cancer",
        "Serum vitamin D levels of 30 ng/ml lower colorectal cancer risk by 12%.",
    ),
    ("D3", "Dietary fiber and heart disease", "High fiber intake reduces the risk of coronary heart disease."),
    ("D4", "Red meat consumption and mortality", "Processed red meat raises all-cause mortality in 1990s studies."),
    ("D5", "Green tea catechins", "Green tea catechins show antioxidant effects; EGCG at 0.5 mg."),
    ("D6", "IL-6 in inflammation", "Interleukin IL-6 and TNF-α mediate inflammation after infection."),
    ("D7", "Soy isoflavones and breast cancer", "Soy intake is associated with lower breast cancer recurrence."),
    ("D8", "Omega-3 fatty acids", "Fish oil omega-3 supplements and cardiovascular events: a meta-analysis."),
    ("D9", "Sugar-sweetened beverages", "Sugar drinks increase type 2 diabetes risk by 26% per serving."),
    ("D10", "Exercise and depression", "Aerobic exercise reduces depressive symptoms in older adults."),
    ("D11", "Arsenic in rice", "Rice contains inorganic arsenic; cooking in excess water lowers it."),
    ("D12", "Coffee and liver disease", "Coffee drinking is inversely associated with liver cirrhosis."),
]


def read_documents(limit: int) -> list[Document]:
    """The first ``limit`` NFCorpus documents, or the fallback documents without the data."""
    path = DEFAULT_NFCORPUS / "corpus.jsonl.gz"
    if not path.is_file():
        return [Document(*row) for row in FALLBACK_DOCS][:limit]
    return list(itertools.islice(read_beir_corpus(path), limit))


@pytest.fixture(scope="session")
def corpus_documents() -> list[Document]:
    return read_documents(600)


@dataclass
class Artifacts:
    """A tiny ESRR_HOME: statistics, embeddings and a random-weight Delta-32-Lex3 checkpoint."""

    home: Path
    stats: CorpusStats
    words: list[str]  # embeddings vocabulary, row order
    vectors: np.ndarray  # float32 [n_words, DIM]
    checkpoint_path: Path

    def embedding_rows(self, tokens: list[str]) -> np.ndarray:
        """Rows of tokens, unknown -> 1, computed independently of the product code."""
        index = {word: row for row, word in enumerate(self.words)}
        return np.array([index.get(t, 1) for t in tokens], dtype=np.int64)

    def another_checkpoint(self, path: Path, seed: int = 1, **config_changes: object) -> Path:
        """Another random-weight model on the same embeddings (an ensemble member), saved at ``path``."""
        import torch

        from worker.model import Checkpoint, DeltaModel

        torch.manual_seed(seed)
        served = Checkpoint.load(self.checkpoint_path)
        config = replace(served.config, **config_changes)
        model = DeltaModel(config, self.vectors)
        Checkpoint(config, model.state_dict(), served.embeddings_version, served.stats_version).save(path)
        return path


def write_embeddings(directory: Path, words: list[str], vectors: np.ndarray, version: str) -> None:
    """An embeddings artifact in the agreed layout: vectors.npy, vocab.txt, meta.json."""
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "vectors.npy", vectors)
    (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (directory / "meta.json").write_text(
        json.dumps({"format": 1, "version": version, "dim": int(vectors.shape[1]), "n_words": len(words)}),
        encoding="utf-8",
    )


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory, corpus_documents: list[Document]) -> Artifacts:
    import torch

    from worker.model import VARIANTS, Checkpoint, DeltaConfig, DeltaModel

    home = tmp_path_factory.mktemp("esrr-home")
    stats = build_stats(STATS_VERSION, corpus_documents[:30])
    stats.save(home / "indexes" / "embedded" / STATS_VERSION / "stats")
    stats = CorpusStats.load(home / "indexes" / "embedded" / STATS_VERSION / "stats")

    rng = np.random.default_rng(7)
    terms = list(stats.vocab.terms)
    rng.shuffle(terms)  # embedding rows in another order than stats ids
    kept = [t for i, t in enumerate(terms) if i % 10 != 3]  # ~10% of the terms have no vector: UNK
    words = ["<pad>", "<unk>", *kept, "zzextra1", "zzextra2"]
    vectors = rng.normal(0.0, 0.3, size=(len(words), DIM)).astype(np.float32)
    vectors[0] = 0.0
    vectors[1] = rng.uniform(-0.25, 0.25, size=DIM)
    write_embeddings(home / "embeddings" / EMBEDDINGS_VERSION, words, vectors, EMBEDDINGS_VERSION)

    torch.manual_seed(0)
    config = DeltaConfig(**VARIANTS["delta-32-lex3"])
    assert config.lex_names == LEX3
    model = DeltaModel(config, vectors)
    model.lex_mean.copy_(torch.tensor([3.0, 0.1, 0.2]))
    model.lex_std.copy_(torch.tensor([2.0, 0.2, 0.3]))
    state = {name: value.clone() for name, value in model.state_dict().items()}
    checkpoint_path = home / "models" / "delta-32-lex3.pt"
    Checkpoint(config, state, EMBEDDINGS_VERSION, STATS_VERSION).save(checkpoint_path)
    return Artifacts(home, stats, words, vectors, checkpoint_path)


def home_without_index(artifacts: Artifacts, tmp_path: Path) -> Path:
    """A copy of the artifacts' home whose embeddings are current, without any served index or votes."""
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    shutil.rmtree(home / "indexes")
    (version,) = [d.name for d in (home / "embeddings").iterdir()]
    write_pointer(home / "embeddings", version)
    return home


def home_with_index(
    artifacts: Artifacts, corpus_documents: list[Document], tmp_path: Path
) -> tuple[Path, EmbeddedBackend]:
    """A copy of the artifacts' home with an embedded index of 30 documents, and that index opened."""
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    build_embedded_index(corpus_documents[:30], home / "indexes" / "embedded", version="local", progress=False)
    return home, EmbeddedBackend.open_current(home / "indexes" / "embedded")


def nfcorpus_with_dev_queries(root: Path, texts: list[str]) -> Path:
    """An NFCorpus look-alike whose dev split holds ``texts`` (the corpus itself is the index's)."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        json.dumps({"_id": "unused", "title": "t", "text": "a"}) + "\n", encoding="utf-8"
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"Q{i}", "text": t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8"
    )
    header = "query-id\tcorpus-id\tscore\n"
    for split in ("train", "test"):
        (root / "qrels" / f"{split}.tsv").write_text(header, encoding="utf-8")
    (root / "qrels" / "dev.tsv").write_text(
        header + "".join(f"Q{i}\tunused\t1\n" for i in range(len(texts))), encoding="utf-8"
    )
    return root
