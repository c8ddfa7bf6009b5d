"""The word2vec embedding table as served: the versioned artifact and how it loads.

Torch-free and gensim-free, so the worker and the evaluation load embeddings
without the training code; ``index_setup.embeddings`` trains and writes them
(its docstring describes the recipe and the artifact's files).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from es_rerank.settings import CommonSettings, missing_from_home
from es_rerank.versions import CURRENT_FILE, VersionNameError, read_pointer

ARTIFACT_FORMAT = 1
PAD, UNK = 0, 1
PAD_TOKEN, UNK_TOKEN = "<pad>", "<unk>"


class EmbeddingsError(Exception):
    """Embeddings are missing, incomplete or cannot be trained; the message says what to do."""


@dataclass
class Embeddings:
    """A loaded embedding table: ``vectors[row]`` is the vector of ``vocab[row]``."""

    vectors: np.ndarray  # float32 [rows, dim]; row 0 PAD, row 1 UNK
    vocab: list[str]
    version: str
    meta: dict = field(default_factory=dict)
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.vocab) != len(self.vectors):
            raise EmbeddingsError(
                f"{self.version}: {len(self.vocab)} words but {len(self.vectors)} vectors, so "
                "vocab.txt or vectors.npy is damaged; retrain with `esrr embeddings train`, then "
                "the models with `esrr train`"
            )
        if self.vocab[:2] != [PAD_TOKEN, UNK_TOKEN]:
            raise EmbeddingsError(
                f"{self.version}: the vocabulary must start with {PAD_TOKEN}, {UNK_TOKEN}; "
                "retrain with `esrr embeddings train`, then the models with `esrr train`"
            )
        self.index = {word: row for row, word in enumerate(self.vocab)}

    @property
    def dim(self) -> int:
        """Vector size V."""
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.vocab)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> Embeddings:
        """Load a version directory; ``mmap`` maps ``vectors.npy`` read-only instead of reading it."""
        directory = Path(directory)
        missing = [n for n in ("vectors.npy", "vocab.txt", "meta.json") if not (directory / n).is_file()]
        if missing:
            raise EmbeddingsError(
                f"{directory} is not a complete embeddings artifact (missing {', '.join(missing)}); "
                "run `esrr embeddings train`"
            )
        retrain = "retrain with `esrr embeddings train`"
        try:
            meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                raise ValueError(f"a JSON {type(meta).__name__}, not an object")
        except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
            raise EmbeddingsError(f"{directory}/meta.json is damaged ({error}); {retrain}") from None
        if meta.get("format") != ARTIFACT_FORMAT:
            raise EmbeddingsError(
                f"{directory}: artifact format {meta.get('format')!r}, this code reads {ARTIFACT_FORMAT}; {retrain}"
            )
        try:
            vectors = np.load(directory / "vectors.npy", mmap_mode="r" if mmap else None)
            vocab = (directory / "vocab.txt").read_text(encoding="utf-8").split("\n")
        except (ValueError, EOFError, UnicodeDecodeError):  # numpy's text suggests allow_pickle: unsafe advice
            raise EmbeddingsError(f"{directory}: vectors.npy or vocab.txt is damaged; {retrain}") from None
        if vectors.ndim != 2 or vectors.dtype.kind != "f":
            raise EmbeddingsError(
                f"{directory}: vectors.npy holds a {vectors.dtype} array of shape {vectors.shape}, "
                f"not one row of floats per word; it is damaged: {retrain}"
            )
        # min and max are NaN or infinite when any entry is, without a mask the table's size;
        # a NaN would otherwise surface as NaN scores or a fusion error.
        if vectors.size and not (math.isfinite(vectors.min()) and math.isfinite(vectors.max())):
            raise EmbeddingsError(f"{directory}: vectors.npy holds NaN or infinite values; it is damaged: {retrain}")
        if vocab and vocab[-1] == "":
            vocab.pop()
        return cls(vectors, vocab, meta.get("version", directory.name), meta)

    def lookup(self, tokens: Iterable[str]) -> np.ndarray:
        """Row ids (int64) of embedding-path tokens; unknown words map to UNK = 1."""
        get = self.index.get
        tokens = list(tokens)
        return np.fromiter((get(t, UNK) for t in tokens), dtype=np.int64, count=len(tokens))

    def nearest(self, word: str, k: int = 10) -> list[tuple[str, float]]:
        """The ``k`` words closest to ``word`` by cosine similarity (PAD and UNK excluded)."""
        if word not in self.index or self.index[word] <= UNK:  # PAD and UNK have no neighbours
            raise KeyError(f"{word!r} is not in the vocabulary of {self.version}")
        words = np.asarray(self.vectors[2:], dtype=np.float32)
        norms = np.linalg.norm(words, axis=1)
        norms[norms == 0] = 1.0
        query = words[self.index[word] - 2]
        sims = words @ query / (norms * max(float(np.linalg.norm(query)), 1e-12))
        order = np.argsort(-sims)[: k + 1]
        return [(self.vocab[i + 2], float(sims[i])) for i in order if i + 2 != self.index[word]][:k]


def current_version(embeddings_dir: Path) -> str | None:
    """The version named by ``<embeddings_dir>/CURRENT``, or None; ``EmbeddingsError`` for a damaged pointer."""
    try:
        return read_pointer(Path(embeddings_dir))
    except VersionNameError as error:
        raise EmbeddingsError(f"{error} (or retrain with `esrr embeddings train`)") from None


def load_current(settings: CommonSettings | None = None, mmap: bool = True) -> Embeddings:
    """The embeddings that ``CURRENT`` points at, under ``settings.embeddings_dir``."""
    embeddings_dir = (settings or CommonSettings()).embeddings_dir
    version = current_version(embeddings_dir)
    if version is None:
        raise EmbeddingsError(
            missing_from_home(
                f"no trained embeddings in {Path(embeddings_dir).absolute()} (no {CURRENT_FILE} file)",
                "train them there with `esrr embeddings train`",
            )
        )
    return Embeddings.load(embeddings_dir / version, mmap=mmap)
