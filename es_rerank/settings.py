"""Settings shared by every process, read from ``ESRR_*`` environment variables.

Process-specific settings (gateway, worker) subclass ``CommonSettings`` next to
the code that uses them; everything is validated at start-up.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from es_rerank.lex import LEX3, LEX3_WINDOW, check_feature_names
from es_rerank.payload import DEFAULT_QUEUE

DEFAULT_NFCORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nfcorpus"
# A window's standardised scores stay within +-sqrt(n) (22 for 500 hits) and votes within
# [0, 1] (feedback: standardised too), so a vote weight up to this keeps fused scores finite
# and meaningful in float32; the served weights are 6 (judged neighbours) and 0.5 (feedback).
MAX_VOTE_WEIGHT = 100.0
# The most requests a gateway serves at once; also the room its broker connection pool makes
# (``es_rerank.ranking.dispatch.caller_config``), so no search waits for a pooled connection.
MAX_GATEWAY_THREADS = 256
# The concrete indices are named <alias>-<version>: Elasticsearch allows 255 bytes, a version 128 characters.
MAX_ALIAS_BYTES = 255 - 1 - 128
ALIAS_FORBIDDEN = '\\/*?"<>|,#: '
# What POST _security/api_key returns: "encoded" (base64 of ID:API_KEY), or the id and api_key themselves.
API_KEY_ENCODED = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")
API_KEY_PART = re.compile(r"[A-Za-z0-9_-]+")


def alias_problem(alias: str) -> str | None:
    """Which Elasticsearch index-name rule ``alias`` breaks (None: it is usable as alias and name prefix)."""
    if not alias:
        return "is empty"
    if alias != alias.lower():
        return "has upper-case letters; Elasticsearch index names are lower case"
    bad = [char for char in ALIAS_FORBIDDEN if char in alias]
    if bad:
        named = ", ".join("a space" if char == " " else char for char in bad)
        return f'contains {named}; Elasticsearch index names have none of \\ / * ? " < > | , # : or space'
    if alias[0] in "-_+":
        return "starts with '-', '_' or '+', which Elasticsearch does not allow"
    if alias in (".", ".."):
        return "is '.' or '..', which Elasticsearch does not allow"
    if len(alias.encode()) > MAX_ALIAS_BYTES:
        return (
            f"is {len(alias.encode())} bytes long; at most {MAX_ALIAS_BYTES} leave room for the "
            "'-<version>' of the index names within Elasticsearch's 255 bytes"
        )
    return None


def not_empty_path(value: Any, default: str) -> Any:
    """``value`` unless it is an empty or blank string, which would be Path(""), the current directory."""
    if isinstance(value, str) and not value.strip():
        raise ValueError(
            f"is empty, which would mean the current directory; unset it for the default "
            f"({default}) or name a directory"
        )
    return value


DEFAULT_CHECKPOINT_NAME = "delta-32-lex3.pt"  # the paper's Delta-32-Lex3
# Served in its place once trained: Lex3 standardised within the window, chosen on dev under shift (docs/quality.md).
WINDOW_CHECKPOINT_NAME = "delta-32-lex3-window.pt"


def checkpoint_lex_features(checkpoint: Path) -> tuple[str, ...]:
    """The Lex features a checkpoint reads, from the record `esrr train` writes beside it (torch-free).

    A record without them (written before it named them): Lex3 on the window scale for the window
    variant's file name, the paper's Lex3 otherwise.
    """
    import json

    record = checkpoint.with_suffix(".json")
    try:
        names = json.loads(record.read_text(encoding="utf-8")).get("lex_features")
    except (OSError, ValueError, AttributeError):  # no record, or not one of ours: fall back on the name
        names = None
    if isinstance(names, list) and names:
        try:
            return check_feature_names(names)
        except ValueError as error:
            raise ValueError(
                f"{record} names Lex features the model cannot read ({error}); retrain it with `esrr train`"
            ) from None
    return LEX3_WINDOW if checkpoint.name == WINDOW_CHECKPOINT_NAME else LEX3


REDIS_SCHEMES = ("redis", "rediss", "redis+socket")
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
RESULT_ONLY_SCHEMES = ("rpc",)


def checkpoint_list(value: str) -> tuple[Path, ...]:
    """The checkpoints of a comma-separated list (an ensemble's members); ``ValueError`` names the problem."""
    parts = [part.strip() for part in value.split(",")]
    if not all(parts):
        raise ValueError(f"{value!r} has an empty entry; separate checkpoint files with single commas")
    paths = tuple(Path(part) for part in parts)
    if len({path.resolve() for path in paths}) < len(paths):
        raise ValueError(f"{value!r} names one checkpoint twice; an ensemble lists each member once")
    return paths


def _require_port_number(variable: str, url: str, example: str) -> None:
    """``ValueError`` naming ``variable`` when ``url``'s port is not a number in 1-65535 (the URL is not echoed)."""
    try:
        port = urlsplit(url).port  # None without one; urllib raises on a port that is not a number in 0-65535
    except ValueError:  # its text holds the URL, which may carry a password: not chained
        port = 0
    if port == 0:
        raise ValueError(f"{variable}: the port must be a number in 1-65535, as in {example}")


SSL_CERT_REQS = ("required", "optional", "none", "CERT_REQUIRED", "CERT_OPTIONAL", "CERT_NONE")


def _check_redis_url(variable: str, url: str) -> None:
    """``ValueError`` naming ``variable`` for a Redis URL that would fail only when the first task is sent.

    The message never echoes the URL (it may carry a password). ``rediss://`` must say
    how to check the server's certificate: Celery's result backend refuses it without,
    and kombu, as broker, would fall back to no check at all.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return
    if not re.fullmatch(r"/?\d*", parts.path):
        raise ValueError(f"{variable}: a Redis URL ends in a database number, as in redis://HOST:6379/0")
    from redis.connection import parse_url

    try:
        parse_url(url)
    except ValueError as error:  # redis' text names the parameter or the part, not the URL
        raise ValueError(f"{variable}: {error} Fix the URL, as in redis://HOST:6379/0?socket_timeout=5") from None
    cert_reqs = parse_qs(parts.query).get("ssl_cert_reqs", [None])[-1]
    if parts.scheme == "rediss" and cert_reqs not in SSL_CERT_REQS:
        raise ValueError(
            f"{variable}: a rediss:// URL needs ssl_cert_reqs=required (or optional, or none), "
            "as in rediss://HOST:6380/0?ssl_cert_reqs=required"
        )


def missing_from_home(missing: str, make: str) -> str:
    """A message for something missing under ESRR_HOME: what and where (``missing``), both fixes, and ``make``.

    ESRR_HOME defaults to ./artifacts of the current folder, so a command run from another
    folder looks in the wrong place; ``missing`` should name the folder looked in, absolute.
    """
    return (
        f"{missing}. ESRR_HOME defaults to ./artifacts of the current folder: cd to the es-rerank folder "
        f"or set ESRR_HOME=/path/to/artifacts; or {make}"
    )


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


class BrokerSettings(CommonSettings):
    """What a caller and a worker must agree on: the broker, the queue, the served model and its Lex features.

    The gateway and ``esrr search --worker`` read these to send a task; a worker
    (``worker.settings.WorkerSettings``) adds its own. Torch-free.
    """

    broker_url: str = Field(
        "redis://127.0.0.1:6379/0", description="Redis (redis://) or RabbitMQ (amqp://guest:guest@host:5672//)"
    )
    result_backend: str | None = Field(
        None, description="default: the Redis broker itself, or rpc:// with an AMQP broker"
    )
    queue: str = Field(DEFAULT_QUEUE, min_length=1, description="queue the worker consumes")

    checkpoint: Annotated[tuple[Path, ...], NoDecode] = Field(
        (),
        description=f"the served .pt file; default: <home>/models/{WINDOW_CHECKPOINT_NAME} when trained, else "
        f"<home>/models/{DEFAULT_CHECKPOINT_NAME}. Several, "
        "comma-separated, are served as one ensemble (worker.ensemble): the mean of their "
        "scores, each standardised within the request",
    )
    score_deadline_s: float = Field(
        2.0,
        gt=0,
        le=600,
        description="caller side (`esrr search --worker`): longest wait for a worker's "
        "scores; the task expires then, and the query keeps BM25's order. "
        "Celery checks for the answer once a second, so a wait past it ends "
        "at the next whole second",
    )
    # Caller side, during an outage (es_rerank/ranking/breaker.py, dispatch.py; docs/operations.md).
    breaker_failures: int = Field(
        3,
        ge=1,
        le=1000,
        description="searches in a row without a worker answer "
        "after which the gateway stops asking the workers for a cool-down",
    )
    breaker_cooldown_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="how long searches then skip the workers (BM25 order at once) before one search probes them again",
    )
    breaker_refine: bool = Field(
        True,
        description="while the breaker skips the workers, refine BM25's window "
        "with the candidate feedback and votes (true), or answer BM25's page alone "
        "(false: the cheapest fallback, in BM25's order)",
    )
    queue_max_tasks: int = Field(
        5,
        ge=1,
        le=100_000,
        description="Redis: tasks left waiting on the queue "
        "above which a search sends none and falls back; bounds what an outage leaves "
        "on the broker (5 x at most 190 KB for a window of 500)",
    )
    lex_features: Annotated[tuple[str, ...], NoDecode] = Field(
        LEX3,
        description="caller side: the Lex features the served model reads, comma-separated; default: "
        "those the record beside the served checkpoint names (`esrr train` writes it), else "
        "Lex3 (on the window scale for the window variant)",
    )
    broker_key_prefix: str = Field("", description="Redis key prefix, to share a Redis database")

    result_expires_s: int = Field(600, ge=1, description="results are read at once; keep Redis clean")

    @property
    def broker_scheme(self) -> str:
        """The broker URL's scheme (redis, amqp, ...)."""
        return urlsplit(self.broker_url).scheme

    @property
    def is_redis(self) -> bool:
        """Whether the broker is Redis (redelivery by visibility timeout)."""
        return self.broker_scheme in REDIS_SCHEMES

    @property
    def checkpoint_paths(self) -> tuple[Path, ...]:
        """The served checkpoint (ESRR_CHECKPOINT; default the window variant once trained, else the paper's), or the
        members of the served ensemble."""
        if self.checkpoint:
            return self.checkpoint
        window = self.models_dir / WINDOW_CHECKPOINT_NAME
        return (window if window.is_file() else self.models_dir / DEFAULT_CHECKPOINT_NAME,)

    @property
    def checkpoint_path(self) -> Path:
        """The served checkpoint (an ensemble's first member)."""
        return self.checkpoint_paths[0]

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _split_checkpoints(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        if isinstance(value, (str, Path)):
            return checkpoint_list(str(value)) if str(value).strip() else ()
        return value

    @field_validator("lex_features", mode="before")
    @classmethod
    def _split_lex_features(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        return check_feature_names(list(value))

    @property
    def result_backend_url(self) -> str:
        """Where results go: both choices push results to the waiting client (no polling)."""
        if self.result_backend:
            return self.result_backend
        return self.broker_url if self.is_redis else "rpc://"

    def _check_result_backend(self, url: str) -> None:
        """A result backend this package can talk to (the URL is not echoed: it may carry a password)."""
        scheme = urlsplit(url).scheme
        if scheme not in REDIS_SCHEMES + RESULT_ONLY_SCHEMES:
            raise ValueError(
                f"ESRR_RESULT_BACKEND has scheme {scheme!r}: use redis://HOST:6379/DB, rpc:// "
                "with an AMQP broker, or leave it unset"
            )
        _require_port_number("ESRR_RESULT_BACKEND", url, "redis://HOST:6379/1")
        _check_redis_url("ESRR_RESULT_BACKEND", url)
        if scheme in RESULT_ONLY_SCHEMES and self.is_redis:
            raise ValueError(
                "ESRR_RESULT_BACKEND=rpc:// needs an AMQP broker; leave it unset to use "
                "the Redis broker as result backend"
            )

    @model_validator(mode="after")
    def _check_broker(self) -> BrokerSettings:
        if self.broker_scheme not in REDIS_SCHEMES + AMQP_SCHEMES:
            # The URL itself is not echoed: it may carry a password.
            raise ValueError(
                f"ESRR_BROKER_URL has scheme {self.broker_scheme!r}: use redis://HOST:6379/DB or "
                "amqp://USER:PASSWORD@HOST:5672//"
            )
        _require_port_number("ESRR_BROKER_URL", self.broker_url, "redis://HOST:6379/0")
        _check_redis_url("ESRR_BROKER_URL", self.broker_url)
        for path in self.checkpoint:
            if path.is_dir():
                raise ValueError(
                    f"ESRR_CHECKPOINT names {str(path)!r}, a directory; point it to the .pt "
                    "file `esrr train` wrote (several: comma-separated), or leave it unset "
                    "for <home>/models"
                )
        if self.result_backend:
            self._check_result_backend(self.result_backend)
        if "lex_features" not in self.model_fields_set:  # what the served model reads, not what a variable says
            self.lex_features = checkpoint_lex_features(self.checkpoint_path)
        return self


def settings_problems(error: ValidationError) -> str:
    """A ``ValidationError`` of settings as one line per problem, named by its variable, values left out."""
    problems = "\n".join(
        f"  {'ESRR_' + '_'.join(map(str, e['loc'])).upper() + ': ' if e['loc'] else ''}{e['msg']}"
        for e in error.errors()
    )
    return f"invalid settings (ESRR_* environment):\n{problems}"
