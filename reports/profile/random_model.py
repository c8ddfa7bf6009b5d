"""A random-weight Delta-32-Lex3-window and random embeddings in ESRR_HOME, for profiling the served path.

The gateway's CPU does not depend on the model's weights: what it computes and sends is the same for
a trained and an untrained model. This makes a served home in seconds where training takes minutes:
`esrr index build`, `esrr neighbours build`, then `python reports/profile/random_model.py`.

``--words N`` keeps the N most frequent forms (by document frequency), the others read as ``<unk>``: at 1M
documents every form would make 1.4M vectors (1.7 GB on disk and in the worker), where ``esrr bench scale``'s
model keeps 100,000.
"""

from __future__ import annotations

import json
import sys

import click
import numpy as np
import torch

from es_rerank.settings import WINDOW_CHECKPOINT_NAME, CommonSettings
from es_rerank.stats import CorpusStats
from es_rerank.versions import read_pointer, write_pointer
from worker.model import VARIANTS, Checkpoint, DeltaConfig, DeltaModel

DIM = 300
VERSION = "random"


@click.command()
@click.option(
    "--words",
    "most_frequent",
    type=click.IntRange(min=0),
    default=0,
    help="Most frequent forms given a vector (0: all).",
)
def main(most_frequent: int) -> None:
    """Write the random embeddings and checkpoint into ESRR_HOME."""
    settings = CommonSettings()
    root = settings.indexes_dir / "embedded"
    stats = CorpusStats.load(root / str(read_pointer(root)) / "stats")
    forms = np.unique(stats.embedding_of)
    if most_frequent:
        forms = forms[np.argsort(-np.asarray(stats.df["text"])[forms], kind="stable")[:most_frequent]]
    words = ["<pad>", "<unk>", *sorted({stats.vocab.terms[int(i)] for i in forms})]
    rng = np.random.default_rng(13)
    vectors = rng.normal(0.0, 0.3, size=(len(words), DIM)).astype(np.float32)
    vectors[0] = 0.0
    directory = settings.embeddings_dir / VERSION
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "vectors.npy", vectors)
    (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (directory / "meta.json").write_text(
        json.dumps({"format": 1, "version": VERSION, "dim": DIM, "n_words": len(words)}), encoding="utf-8"
    )
    write_pointer(settings.embeddings_dir, VERSION)
    torch.manual_seed(13)
    config = DeltaConfig(**VARIANTS["delta-32-lex3-window"])
    model = DeltaModel(config, vectors)
    path = settings.models_dir / WINDOW_CHECKPOINT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    Checkpoint(config, model.state_dict(), VERSION, stats.version).save(path)
    print(f"random model {path} on embeddings {directory} ({len(words)} words)", file=sys.stderr)


if __name__ == "__main__":
    main()
