"""The scoring task's payload: what the gateway sends to a worker, torch-free.

The gateway imports this module (never ``worker``), builds a ``ScoreRequest`` from
the BM25 hits with ``build_request``, and sends ``encode(request)`` to the task
named ``TASK_NAME``; the worker runs ``decode`` on it. Both sides therefore share
one definition of the format, its limits and its errors.

Format (version 1): a JSON object, sent with Celery's ``json`` serializer.

    {"v": 1, "stats_version": "...", "stats_build": "...", "query_tokens": ["<=7 embedding-path tokens"],
     "lex_names": ["abstract_bm25", ...], "n": 500,
     "doc_tokens": {"dtype": "<i4", "shape": [500, 50], "codec": "raw",  "b64": "..."},
     "lex":        {"dtype": "<f4", "shape": [500, 3],  "codec": "raw",  "b64": "..."}}

Why JSON + base64 of little-endian arrays rather than msgpack with raw bytes:
JSON is Celery's default serializer, works unchanged over Redis and RabbitMQ, needs
no extra package in either process, and stays readable in a broker monitor (the
header is plain JSON; only the two arrays are opaque). base64 costs a third more
bytes. Each array may be sent "raw" or "zlib"-compressed, and the worker reads both.
The gateway sends both raw: zlib would halve the token ids (small integers in int32,
their upper bytes mostly zero: 500 NFCorpus documents' 100 KB to 45 KB), but even at
level 1 encoding took 7.6 times the CPU (2.5 against 0.33 ms), and the whole scoring
call, the larger send included, 1.13 times (reports/profile/micro.py), where the
gateway's CPU is what limits a search's throughput. 500 NFCorpus documents come to
141 KB (133 KB of token ids, 8 KB of Lex features, a few hundred bytes of header)
against 154 KB as JSON lists of numbers.

The documents are sent as ids in the statistics vocabulary of ``stats_version``
(the index the hits came from), not as embedding rows: the gateway knows nothing
of the embeddings, and the worker maps the ids to rows with a table it builds once
per statistics version (``worker.runtime``). ``stats_build`` names which build of
that version (``CorpusStats.build_id``): a version name that a prune freed can be
built again with another vocabulary, and the worker refuses ids of a build it does not
hold rather than map them to the wrong words. An empty one is not checked.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from es_rerank.lex import KNOWN_FEATURES, LEX3, lex_features
from es_rerank.stats import FIRST_TOKENS, CorpusStats, DocTerms
from es_rerank.text import embedding_tokens, tokenize

TASK_NAME = "rerank.score"  # the stable name the gateway sends by
DEFAULT_QUEUE = "rerank"  # the queue that workers consume and the gateway routes to
PAYLOAD_VERSION = 1
RESULT_VERSION = 1  # the "v" of the task's result {"v", "scores", "model", "took_ms", "batch"}

QUERY_LEN = 7  # M of the paper: query tokens the model reads
DOC_LEN = FIRST_TOKENS  # N of the paper: document tokens the model reads
DOC_PAD = -1  # padding in ``doc_tokens`` (stats ids start at 0)
MAX_DOCS = 1000  # twice the BM25 window the gateway reranks
MAX_TOKEN_CHARS = 200
ZLIB_LEVEL = 1


class PayloadError(ValueError):
    """A scoring payload is malformed; the message says what is wrong and how to fix it.

    Raised by ``encode``/``build_request`` in the gateway and by ``decode`` in the
    worker; when the worker raises it, Celery stores it as the task's failure and
    ``AsyncResult.get`` re-raises it as this class wherever this module is imported.
    Never retried: the same payload would fail the same way.
    """


class LexFeaturesMismatch(PayloadError):
    """The worker's model reads other Lex features than the request carries; ``served`` names the model's.

    A caller can follow the model (build the request again with ``served``): a gateway started
    before a model with other features was trained otherwise fails every search. The names
    travel as the second argument, a comma-separated string, since Celery rebuilds a task's
    exception from its arguments.
    """

    def __init__(self, message: str, served: str = "") -> None:
        super().__init__(message, served)
        self.served = tuple(name for name in served.split(",") if name)

    def __str__(self) -> str:
        return str(self.args[0])


class WorkerSetupError(RuntimeError):
    """The worker cannot score: a missing or mismatched checkpoint, embeddings or statistics.

    Lives here (torch-free) so the gateway gets this class back from a failed task.
    """


@dataclass(frozen=True)
class ScoreRequest:
    """One query against its candidate documents, as the worker needs them."""

    stats_version: str
    query_tokens: tuple[str, ...]  # embedding-path tokens of the query, <= QUERY_LEN
    doc_tokens: np.ndarray  # int32 [n, DOC_LEN] stats-vocabulary ids, DOC_PAD padded
    lex: np.ndarray  # float32 [n, L] Lex features, L = len(lex_names)
    lex_names: tuple[str, ...]
    stats_build: str = ""  # CorpusStats.build_id of stats_version; "" is not checked

    @property
    def n(self) -> int:
        """Number of documents in the request."""
        return int(self.doc_tokens.shape[0])

    def validate(self) -> ScoreRequest:
        """Check every limit of the format; raises ``PayloadError``; returns self."""
        if not isinstance(self.stats_version, str) or not self.stats_version:
            raise PayloadError("stats_version must be a non-empty string naming the index version the hits came from")
        if not isinstance(self.stats_build, str):
            raise PayloadError(
                "stats_build must be a string naming the build of stats_version (CorpusStats.build_id), or empty"
            )
        _check_query(self.query_tokens)
        _check_lex_names(self.lex_names)
        docs, lex = self.doc_tokens, self.lex
        if docs.dtype != np.int32 or docs.ndim != 2 or docs.shape[1] != DOC_LEN:
            raise PayloadError(
                f"doc_tokens must be int32 [n, {DOC_LEN}], got {docs.dtype} "
                f"{list(docs.shape)}; pad or cut each document's first_ids to "
                f"{DOC_LEN} with {DOC_PAD}"
            )
        _check_doc_count(docs.shape[0])
        if docs.size and int(docs.min()) < DOC_PAD:
            raise PayloadError(
                f"doc_tokens holds id {int(docs.min())}; ids are >= 0 with "
                f"{DOC_PAD} as padding (unknown terms have no place in first_ids)"
            )
        if lex.dtype != np.float32 or lex.ndim != 2:
            raise PayloadError(f"lex must be float32 [n, L], got {lex.dtype} {list(lex.shape)}")
        if lex.shape[0] != docs.shape[0]:
            raise PayloadError(
                f"lex has {lex.shape[0]} rows but doc_tokens has {docs.shape[0]} "
                "documents; compute one row of Lex features per document"
            )
        if lex.shape[1] != len(self.lex_names):
            raise PayloadError(
                f"lex has {lex.shape[1]} columns but lex_names names {len(self.lex_names)} features; they must match"
            )
        if lex.size and not np.isfinite(lex).all():
            raise PayloadError("lex holds NaN or infinite values; check the statistics the features were computed from")
        return self


def _check_doc_count(n: int) -> None:
    if n > MAX_DOCS:
        raise PayloadError(
            f"{n} documents in one request, the limit is {MAX_DOCS}; rerank a smaller BM25 window or split the request"
        )


def _check_query(value: object) -> tuple[str, ...]:
    """``value`` as query tokens, or ``PayloadError`` naming what is wrong."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise PayloadError("query_tokens must be a list of strings (embedding-path tokens)")
    tokens: tuple[str, ...] = tuple(value)
    if not tokens:
        raise PayloadError("the query has no tokens, so there is nothing to rerank by; keep the BM25 order")
    if len(tokens) > QUERY_LEN:
        raise PayloadError(
            f"query_tokens has {len(tokens)} tokens, the model reads {QUERY_LEN}; truncate them (build_request does)"
        )
    if any(not t or len(t) > MAX_TOKEN_CHARS for t in tokens):
        raise PayloadError(
            f"query tokens must be 1..{MAX_TOKEN_CHARS} characters; tokenize the query with es_rerank.text.tokenize"
        )
    return tokens


def _check_lex_names(value: object) -> tuple[str, ...]:
    """``value`` as Lex feature names, or ``PayloadError`` naming what is wrong."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(n, str) for n in value):
        raise PayloadError("lex_names must be a list of feature names")
    names: tuple[str, ...] = tuple(value)
    unknown = [n for n in names if n not in KNOWN_FEATURES]
    if unknown:
        raise PayloadError(f"unknown Lex feature(s) {unknown}; choose from {list(KNOWN_FEATURES)}")
    if len(set(names)) != len(names):
        raise PayloadError(f"lex_names {list(names)} repeats a feature")
    return names


def build_request(
    query: str, hits_terms: Sequence[DocTerms], stats: CorpusStats, lex_names: Sequence[str] = LEX3
) -> ScoreRequest:
    """The request for ``query`` against the hits' precomputed data (in ranking order)."""
    tokens = tokenize(query)
    if not tokens:
        raise PayloadError(f"the query {query!r} has no tokens, so there is nothing to rerank by; keep the BM25 order")
    names = tuple(lex_names)
    lex = lex_features(stats.vocab.lookup(tokens), hits_terms, stats, names)
    doc_tokens = first_tokens([terms.first_ids for terms in hits_terms])
    # A word longer than the payload allows has no vector: cut, it maps to UNK as the whole word would.
    query_tokens = tuple(token[:MAX_TOKEN_CHARS] for token in embedding_tokens(tokens)[:QUERY_LEN])
    return ScoreRequest(
        stats.version, query_tokens, doc_tokens, np.ascontiguousarray(lex, np.float32), names, stats.build_id
    ).validate()


def first_tokens(first_ids: Sequence[np.ndarray]) -> np.ndarray:
    """int32 [n, DOC_LEN] each document's first ``DOC_LEN`` ids, ``DOC_PAD`` padded: one copy for the window."""
    lengths = np.fromiter(map(len, first_ids), dtype=np.int64, count=len(first_ids))
    if len(first_ids) and lengths.max() > DOC_LEN:
        first_ids = [ids[:DOC_LEN] for ids in first_ids]
        lengths = np.minimum(lengths, DOC_LEN)
    doc_tokens = np.full((len(first_ids), DOC_LEN), DOC_PAD, dtype=np.int32)
    if len(first_ids):
        # Row by row, the leading cells of each row: the order in which the ids are concatenated.
        doc_tokens[np.arange(DOC_LEN) < lengths[:, None]] = np.concatenate(first_ids)
    return doc_tokens


def _pack(array: np.ndarray, dtype: str, codec: str) -> dict[str, Any]:
    data = np.ascontiguousarray(array, dtype=np.dtype(dtype)).tobytes()
    if codec == "zlib":
        data = zlib.compress(data, ZLIB_LEVEL)
    return {"dtype": dtype, "shape": list(array.shape), "codec": codec, "b64": base64.b64encode(data).decode("ascii")}


def encode(request: ScoreRequest) -> dict[str, Any]:
    """The JSON-safe payload of a request (validated first)."""
    request.validate()
    return {
        "v": PAYLOAD_VERSION,
        "stats_version": request.stats_version,
        "stats_build": request.stats_build,
        "query_tokens": list(request.query_tokens),
        "lex_names": list(request.lex_names),
        "n": request.n,
        "doc_tokens": _pack(request.doc_tokens, "<i4", "raw"),  # zlib: 7.6x the CPU (module docstring)
        "lex": _pack(request.lex, "<f4", "raw"),
    }


def _unpack(payload: dict[str, Any], key: str, dtype: str, shape: tuple[int, int]) -> np.ndarray:
    """The array under ``key``, checked against the expected dtype and shape."""
    packed = payload.get(key)
    if not isinstance(packed, dict):
        raise PayloadError(
            f"payload field {key!r} is missing or not an object; encode the request with es_rerank.payload.encode"
        )
    if packed.get("dtype") != dtype:
        raise PayloadError(f"{key} has dtype {packed.get('dtype')!r}, expected {dtype!r}")
    if packed.get("shape") != list(shape):
        raise PayloadError(f"{key} has shape {packed.get('shape')}, expected {list(shape)} (n = {shape[0]} documents)")
    codec = packed.get("codec")
    if codec not in ("raw", "zlib"):
        raise PayloadError(f"{key} has codec {codec!r}; this worker reads 'raw' and 'zlib'")
    text = packed.get("b64")
    if not isinstance(text, str):
        raise PayloadError(f"{key}.b64 must be a base64 string")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise PayloadError(
            f"{key}.b64 is not valid base64 ({error}); send the string encode() produced, unchanged"
        ) from None
    expected = math.prod(shape) * np.dtype(dtype).itemsize
    if codec == "zlib":
        inflater = zlib.decompressobj()
        try:
            # Bounded: a corrupt or hostile stream cannot inflate past the expected size.
            data = inflater.decompress(data, expected + 1)
        except zlib.error as error:
            raise PayloadError(f"{key} is not valid zlib data ({error})") from None
    if len(data) != expected:
        raise PayloadError(
            f"{key} holds {len(data)} bytes, shape {list(shape)} of {dtype} needs "
            f"{expected}; the array and its shape disagree"
        )
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).astype(dtype[1:], copy=True)


def _is_version(value: Any, expected: int) -> bool:
    """Whether ``value`` is the integer ``expected``: ``True`` and ``1.0`` equal 1 in Python, not in the format."""
    return type(value) is int and value == expected


def decode(payload: Any) -> ScoreRequest:
    """The request in a payload made by ``encode``; ``PayloadError`` says what is wrong."""
    if not isinstance(payload, dict):
        raise PayloadError(
            f"the payload is a {type(payload).__name__}, expected the object made by es_rerank.payload.encode"
        )
    version = payload.get("v")
    if not _is_version(version, PAYLOAD_VERSION):
        raise PayloadError(
            f"payload version {version!r}, this worker reads version {PAYLOAD_VERSION}; "
            "deploy the gateway and the workers from the same release"
        )
    n = payload.get("n")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise PayloadError(f"n must be a non-negative integer, got {n!r}")
    _check_doc_count(n)
    query_tokens = _check_query(payload.get("query_tokens"))
    lex_names = _check_lex_names(payload.get("lex_names"))
    doc_tokens = _unpack(payload, "doc_tokens", "<i4", (n, DOC_LEN))
    lex = _unpack(payload, "lex", "<f4", (n, len(lex_names)))
    return ScoreRequest(
        payload.get("stats_version", ""),  # validate() refuses "" as it refuses a missing one
        query_tokens,
        doc_tokens,
        lex,
        lex_names,
        payload.get("stats_build", ""),
    ).validate()


def result_scores(result: Any, n: int) -> np.ndarray:
    """float32 [n] scores of a ``rerank.score`` result for ``n`` documents; ``PayloadError`` if malformed."""
    if not isinstance(result, dict) or not _is_version(result.get("v"), RESULT_VERSION):
        version = result.get("v") if isinstance(result, dict) else type(result).__name__
        raise PayloadError(
            f"the worker answered result version {version!r}, this gateway reads version "
            f"{RESULT_VERSION}; deploy the gateway and the workers from the same release"
        )
    try:
        scores = np.asarray(result.get("scores"), dtype=np.float32)
    except (TypeError, ValueError):
        scores = np.zeros(0, dtype=np.float32)
    if scores.shape != (n,) or not np.isfinite(scores).all():
        raise PayloadError(
            f"the worker answered {scores.size} scores for {n} documents, or non-finite ones; "
            "check the worker's log for the task"
        )
    return scores
