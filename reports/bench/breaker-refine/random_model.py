"""A random-weight Delta-32-Lex3 and random word vectors over the served index's vocabulary, in ESRR_HOME.

What the fallback costs does not depend on the model's weights (a skipped search never
reaches the model), so `esrr bench chaos` can run without the 15 minutes of training
`scripts/run.sh` takes. Run with the repository's .venv, ESRR_HOME set, after
`esrr index build`: python reports/bench/breaker-refine/random_model.py
"""

from __future__ import annotations

import numpy as np
import torch

from es_rerank.settings import CommonSettings
from es_rerank.stats import CorpusStats
from es_rerank.versions import read_pointer
from worker.model import VARIANTS, Checkpoint, DeltaConfig, DeltaModel

EMBEDDINGS_VERSION = "random-dim300"

settings = CommonSettings()
root = settings.indexes_dir / "embedded"
version = read_pointer(root)
stats = CorpusStats.load(root / version / "stats")
config = DeltaConfig(**VARIANTS["delta-32-lex3"])
rng = np.random.default_rng(0)
words = ["<pad>", "<unk>", *stats.vocab.terms]
vectors = rng.normal(0.0, 0.3, size=(len(words), config.embedding_dim)).astype(np.float32)
vectors[0] = 0.0
directory = settings.home / "embeddings" / EMBEDDINGS_VERSION
directory.mkdir(parents=True, exist_ok=True)
np.save(directory / "vectors.npy", vectors)
(directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
(directory / "meta.json").write_text(
    f'{{"format": 1, "version": "{EMBEDDINGS_VERSION}", "dim": {vectors.shape[1]}, "n_words": {len(words)}}}',
    encoding="utf-8",
)
(settings.home / "embeddings" / "CURRENT").write_text(EMBEDDINGS_VERSION + "\n", encoding="utf-8")
torch.manual_seed(0)
model = DeltaModel(config, vectors)
Checkpoint(config, model.state_dict(), EMBEDDINGS_VERSION, version).save(settings.home / "models" / "delta-32-lex3.pt")
print(f"random model and embeddings ({len(words)} words) for index version {version} in {settings.home}")
