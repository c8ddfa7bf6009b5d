"""Settings shared by every process, read from ``ESRR_*`` environment variables.

Process-specific settings (gateway, worker) subclass ``CommonSettings`` next to
the code that uses them; everything is validated at start-up.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_NFCORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nfcorpus"


class CommonSettings(BaseSettings):
    """Where artifacts live and which backend serves BM25."""

    model_config = SettingsConfigDict(env_prefix="ESRR_", extra="ignore")

    home: Path = Field(Path("artifacts"), description="root of indexes, statistics, embeddings, models")
    backend: str = Field("embedded", pattern="^(embedded|elasticsearch)$")
    es_url: str = "http://127.0.0.1:9200"
    es_alias: str = "esrr-docs"
    es_timeout_s: float = 30.0
    # BM25 parameters for the Elasticsearch similarity (the paper: k1=2.0, b=0.75 on titles).
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    bm25_title_k1: float = 2.0
    bm25_title_b: float = 0.75

    @property
    def indexes_dir(self) -> Path:
        return self.home / "indexes"

    @property
    def embeddings_dir(self) -> Path:
        return self.home / "embeddings"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"
