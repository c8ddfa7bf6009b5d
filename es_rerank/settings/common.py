"""``CommonSettings``: where artifacts live, which backend serves BM25 and how to reach it, and the weights of
the stages every process may run."""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from es_rerank.settings.checks import alias_problem, not_empty_path

# The repository's sibling ../shared/data/nfcorpus (this file is es_rerank/settings/common.py).
DEFAULT_NFCORPUS = Path(__file__).resolve().parents[3] / "shared" / "data" / "nfcorpus"
# A window's standardised scores stay within +-sqrt(n) (22 for 500 hits) and votes within
# [0, 1] (feedback: standardised too), so a vote weight up to this keeps fused scores finite
# and meaningful in float32; the served weights are 6 (judged neighbours) and 0.5 (feedback).
MAX_VOTE_WEIGHT = 100.0
# The most requests a gateway serves at once; also the room its broker connection pool makes
# (``es_rerank.ranking.dispatch.caller_config``), so no search waits for a pooled connection.
MAX_GATEWAY_THREADS = 256
# What POST _security/api_key returns: "encoded" (base64 of ID:API_KEY), or the id and api_key themselves.
API_KEY_ENCODED = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
API_KEY_PART = re.compile(r"[A-Za-z0-9_-]+")


class CommonSettings(BaseSettings):
    """Where artifacts live and which backend serves BM25."""

    # hide_input_in_errors: a rejected value (a broker URL, say) may carry a password.
    # allow_inf_nan: an infinite timeout passes gt=0 and then fails far away, blaming something else.
    model_config = SettingsConfigDict(
        env_prefix="ESRR_", extra="ignore", hide_input_in_errors=True, allow_inf_nan=False
    )

    home: Path = Field(Path("artifacts"), description="root of indexes, statistics, embeddings, models")
    nfcorpus: Path | None = Field(
        None,
        description="NFCorpus in BEIR layout; default ../shared/data/nfcorpus, "
        "else an ir_datasets export under <home>/datasets",
    )
    backend: str = Field(
        "embedded",
        pattern="^(embedded|elasticsearch|opensearch)$",
        description="embedded (tantivy), elasticsearch (7.14+, 8.x) or opensearch (2.x)",
    )
    es_url: str = Field(
        "http://127.0.0.1:9200",
        description="http(s)://HOST:PORT of the Elasticsearch (or, with ESRR_BACKEND=opensearch, OpenSearch) cluster",
    )
    es_alias: str = "esrr-docs"
    # A cluster with security on (Elasticsearch 8's default) takes a user:password in es_url or an API key,
    # and serves HTTPS with a certificate signed by its own CA.
    es_api_key: SecretStr | None = Field(
        None,
        description="the 'encoded' value of POST _security/api_key, or "
        "its ID:API_KEY; sent as 'Authorization: ApiKey ...'",
    )
    es_ca_certs: Path | None = Field(
        None,
        description="PEM file of the CA that signed the cluster's HTTPS "
        "certificate (Elasticsearch 8: config/certs/http_ca.crt)",
    )
    es_timeout_s: float = Field(30.0, gt=0)
    # BM25 parameters for the Elasticsearch similarity (the paper: k1=2.0, b=0.75 on titles).
    bm25_k1: float = Field(1.2, ge=0)
    bm25_b: float = Field(0.75, ge=0, le=1)
    bm25_title_k1: float = Field(2.0, ge=0)
    bm25_title_b: float = Field(0.75, ge=0, le=1)
    # Elasticsearch index layout and bulk loading (index_setup/es_index.py).
    es_shards: int = Field(1, ge=1, description="primary shards; >1 makes BM25 statistics per shard")
    es_replicas: int = Field(0, ge=0, description="replicas; 0 for a single-node cluster")
    es_bulk_chunk_size: int = Field(500, ge=1, description="documents per _bulk request")
    es_bulk_max_retries: int = Field(3, ge=0, description="retries of a chunk rejected with 429")
    es_bulk_initial_backoff_s: float = Field(2.0, gt=0, description="first retry wait, doubles each retry")
    es_bulk_max_backoff_s: float = Field(60.0, gt=0, description="longest wait between two retries of a chunk")
    es_bulk_threads: int = Field(2, ge=1, le=32, description="_bulk requests in flight at once during a load")
    es_replica_wait_s: float = Field(
        60.0, ge=0, description="how long a load waits for its restored replicas (green) before the alias swap"
    )
    es_keep_versions: int = Field(
        2, ge=0, description="index versions `esrr index prune` keeps (either backend; the served one always stays)"
    )
    # Candidate feedback (es_rerank/ranking/feedback.py), chosen on NFCorpus dev
    # (reports/experiments/candidate-feedback/); weight 0 turns it off.
    feedback_k: int = Field(5, ge=1, description="similar hits whose scores vote for a hit")
    feedback_weight: float = Field(
        0.5, ge=0, le=MAX_VOTE_WEIGHT, description="weight of those votes beside the ranker's score"
    )
    feedback_cache_documents: int = Field(
        50_000,
        ge=0,
        description="documents whose feedback vectors a process "
        "serving many queries keeps (about 1 KB each); 0 keeps none",
    )
    # The BM25 guard (es_rerank/ranking/guard.py): the weight whose worst dev gain over NFCorpus and its three
    # shifted copies was the highest (docs/quality.md, "Collections it has never seen"); 0 turns it off.
    bm25_guard_weight: float = Field(
        0.5, ge=0, le=MAX_VOTE_WEIGHT, description="weight of BM25's standardised scores blended into the model's"
    )

    @field_validator("home", "nfcorpus", mode="before")
    @classmethod
    def _directory_not_empty(cls, value: Any, info: ValidationInfo) -> Any:
        return not_empty_path(value, "./artifacts" if info.field_name == "home" else "../shared/data/nfcorpus")

    @field_validator("home")
    @classmethod
    def _home_is_no_file(cls, home: Path) -> Path:
        # Every command would otherwise blame what it looked for inside (no index, no embeddings).
        if home.exists() and not home.is_dir():
            raise ValueError(f"{home} is a file, not a folder; point it at a folder (made when missing)")
        return home

    @field_validator("es_alias")
    @classmethod
    def _es_alias_is_an_index_name(cls, alias: str) -> str:
        problem = alias_problem(alias)
        if problem:
            raise ValueError(f"{problem}; use a lower-case name such as esrr-docs (the default)")
        return alias

    @field_validator("es_url")
    @classmethod
    def _es_url_has_scheme_host_and_port(cls, url: str) -> str:
        parts = urlsplit(url)
        try:
            port = parts.port  # raises for a port outside 0-65535
        except ValueError:
            port = None
        if parts.scheme not in ("http", "https") or not parts.hostname or not port or " " in url:
            # The URL itself is not echoed: it may carry a password.
            raise ValueError(
                "expected http(s)://HOST:PORT with a port in 1-65535 (the client needs all "
                "three), e.g. http://127.0.0.1:9200"
            )
        return url

    @field_validator("es_ca_certs", mode="before")
    @classmethod
    def _es_ca_certs_not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError(
                "is empty; unset it to trust the system's CAs, or name the PEM file of the "
                "cluster's CA (Elasticsearch 8: config/certs/http_ca.crt)"
            )
        return Path(value).expanduser() if isinstance(value, str) else value

    @field_validator("es_ca_certs")
    @classmethod
    def _es_ca_certs_is_a_pem_file(cls, path: Path | None) -> Path | None:
        if path is None:
            return None
        fix = (
            "name the PEM file of the cluster's CA (Elasticsearch 8 writes it to config/certs/http_ca.crt) "
            "or unset it to trust the system's CAs"
        )
        if not path.is_file():
            raise ValueError(f"{path} is not a file; {fix}")
        try:
            ssl.create_default_context(cafile=str(path))
        except OSError as error:  # ssl.SSLError is one: not PEM, no certificate in it
            raise ValueError(f"{path} cannot be read as CA certificates ({error}); {fix}") from None
        return path

    @field_validator("es_api_key")
    @classmethod
    def _es_api_key_is_one(cls, key: SecretStr | None) -> SecretStr | None:
        if key is None:
            return None
        text = re.sub(r"^ApiKey\s+", "", key.get_secret_value().strip())  # a pasted header value
        pair = [part.strip() for part in text.split(":", 1)]
        # The key is never echoed: the message says only what shape was expected.
        if not text:
            raise ValueError(
                "is empty; unset it, or set the 'encoded' value (or ID:API_KEY) that POST _security/api_key returned"
            )
        if not (API_KEY_ENCODED.fullmatch(text) or (len(pair) == 2 and all(map(API_KEY_PART.fullmatch, pair)))):
            raise ValueError(
                "is not an API key: expected the 'encoded' base64 value or ID:API_KEY that POST "
                "_security/api_key returned, on one line without spaces"
            )
        return SecretStr(":".join(pair))

    @model_validator(mode="after")
    def _es_credentials_agree(self) -> CommonSettings:
        parts = urlsplit(self.es_url)
        if self.es_api_key is not None and (parts.username or parts.password):
            raise ValueError(
                "ESRR_ES_API_KEY and a user:password in ESRR_ES_URL are both set; the cluster takes "
                "one kind of credentials: drop one of them"
            )
        if self.es_api_key is not None and self.backend == "opensearch":
            raise ValueError(
                "ESRR_ES_API_KEY is set but ESRR_BACKEND=opensearch, and OpenSearch has no API keys; put "
                "a user and password in ESRR_ES_URL (https://USER:PASSWORD@HOST:9200) and unset "
                "ESRR_ES_API_KEY"
            )
        if self.es_ca_certs is not None and parts.scheme != "https":
            raise ValueError(
                "ESRR_ES_CA_CERTS is set but ESRR_ES_URL is not https://, so no certificate would be "
                "checked; use the cluster's https:// URL or unset ESRR_ES_CA_CERTS"
            )
        return self

    @property
    def indexes_dir(self) -> Path:
        """Where the index versions (and their statistics) live."""
        return self.home / "indexes"

    @property
    def embeddings_dir(self) -> Path:
        """Where the embeddings versions live."""
        return self.home / "embeddings"

    @property
    def models_dir(self) -> Path:
        """Where the trained checkpoints live."""
        return self.home / "models"

    @property
    def neighbours_path(self) -> Path:
        """The judged-neighbour votes file (`esrr neighbours build`)."""
        return self.models_dir / "judged-neighbours.json"
