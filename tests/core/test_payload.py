"""The scoring payload: torch-free, compact, and every malformation named."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from es_rerank.lex import LEX3, lex_features
from es_rerank.payload import (
    DOC_LEN,
    DOC_PAD,
    MAX_DOCS,
    MAX_TOKEN_CHARS,
    QUERY_LEN,
    RESULT_VERSION,
    PayloadError,
    ScoreRequest,
    build_request,
    decode,
    encode,
    result_scores,
)
from es_rerank.stats import build_stats
from es_rerank.text import embedding_tokens, tokenize

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stats(corpus_documents):
    return build_stats("v-payload", corpus_documents[:500])


@pytest.fixture(scope="module")
def request_500(stats):
    hits = [stats.doc_terms(row) for row in range(min(500, stats.n_docs))]
    return build_request("statin use and breast cancer survival in 2010", hits, stats, LEX3)


def test_round_trip_is_exact_and_json_safe(request_500):
    payload = json.loads(json.dumps(encode(request_500)))  # what the broker carries
    back = decode(payload)
    assert back.stats_version == request_500.stats_version
    assert back.stats_build == request_500.stats_build != ""
    assert back.query_tokens == request_500.query_tokens
    assert back.lex_names == request_500.lex_names
    np.testing.assert_array_equal(back.doc_tokens, request_500.doc_tokens)
    np.testing.assert_array_equal(back.lex, request_500.lex)
    assert back.doc_tokens.dtype == np.int32 and back.lex.dtype == np.float32
    back.doc_tokens[0, 0] = 5  # decoded arrays are writable copies, not views of the payload


def test_500_documents_are_well_under_200_kb(request_500):
    size = len(json.dumps(encode(request_500)))
    # ~142 KB for 500 NFCorpus documents: 50 int32 ids and 3 float32 features a document, in base64 (raw: zlib
    # would halve it at ten times the gateway's CPU, es_rerank.payload)
    assert size < 1_000 + 290 * request_500.n, size


def test_build_request_follows_the_model_inputs(stats):
    hits = [stats.doc_terms(row) for row in range(5)]
    query = "Do statins (20 mg) reduce breast cancer recurrence in 2010 cohorts of older women?"
    request = build_request(query, hits, stats)
    tokens = tokenize(query)
    assert request.query_tokens == tuple(embedding_tokens(tokens)[:QUERY_LEN])
    assert "<int>" in request.query_tokens  # numbers are collapsed into their class
    assert len(request.query_tokens) == QUERY_LEN
    assert request.doc_tokens.shape == (5, DOC_LEN)
    for row, terms in enumerate(hits):
        first = terms.first_ids[:DOC_LEN]
        np.testing.assert_array_equal(request.doc_tokens[row, : len(first)], first)
        assert (request.doc_tokens[row, len(first) :] == DOC_PAD).all()
    np.testing.assert_array_equal(request.lex, lex_features(stats.vocab.lookup(tokens), hits, stats, LEX3))


def test_a_word_too_long_for_the_payload_is_cut_not_refused(stats):
    word = "acgt" * 60  # 240 characters: a sequence pasted into the search box
    request = build_request(f"green tea {word}", [stats.doc_terms(0)], stats)
    assert request.query_tokens[-1] == word[:MAX_TOKEN_CHARS]
    assert decode(encode(request)).query_tokens == request.query_tokens


def test_build_request_without_lex_features(stats):
    request = build_request("breast cancer", [stats.doc_terms(0)], stats, lex_names=())
    assert request.lex.shape == (1, 0)
    assert decode(encode(request)).lex.shape == (1, 0)


def test_empty_query_and_no_documents(stats):
    with pytest.raises(PayloadError, match="no tokens"):
        build_request("?!", [stats.doc_terms(0)], stats)
    empty = build_request("breast cancer", [], stats)
    assert decode(encode(empty)).n == 0


def _good(stats) -> dict:
    return encode(build_request("breast cancer statins", [stats.doc_terms(r) for r in range(3)], stats))


def _array(array: np.ndarray, dtype: str, codec: str = "raw") -> dict:
    data = np.ascontiguousarray(array, dtype=dtype).tobytes()
    data = zlib.compress(data) if codec == "zlib" else data
    return {"dtype": dtype, "shape": list(array.shape), "codec": codec, "b64": base64.b64encode(data).decode()}


BAD_PAYLOADS = {
    "not a dict": (lambda p: [p], "expected the object"),
    "wrong version": (lambda p: {**p, "v": 2}, "payload version 2.*same release"),
    "no version": (lambda p: {k: v for k, v in p.items() if k != "v"}, "payload version None"),
    "boolean version": (lambda p: {**p, "v": True}, "payload version True"),
    "float version": (lambda p: {**p, "v": 1.0}, "payload version 1.0"),
    "n mismatch": (lambda p: {**p, "n": 4}, r"doc_tokens has shape \[3, 50\], expected \[4, 50\]"),
    "lex rows mismatch": (
        lambda p: {**p, "lex": _array(np.zeros((2, 3)), "<f4")},
        r"lex has shape \[2, 3\], expected \[3, 3\]",
    ),
    "doc width": (
        lambda p: {**p, "doc_tokens": _array(np.zeros((3, 40)), "<i4", "zlib")},
        r"shape \[3, 40\], expected \[3, 50\]",
    ),
    "bad base64": (lambda p: {**p, "lex": {**p["lex"], "b64": "@@not base64@@"}}, "not valid base64"),
    "truncated data": (lambda p: {**p, "lex": {**p["lex"], "b64": p["lex"]["b64"][:8]}}, "holds 6 bytes.*needs 36"),
    "bad zlib": (
        lambda p: {**p, "doc_tokens": {**p["doc_tokens"], "codec": "zlib", "b64": base64.b64encode(b"xx").decode()}},
        "not valid zlib",
    ),
    "wrong dtype": (lambda p: {**p, "lex": {**p["lex"], "dtype": "<f8"}}, "dtype '<f8', expected '<f4'"),
    "unknown codec": (lambda p: {**p, "lex": {**p["lex"], "codec": "lz4"}}, "codec 'lz4'"),
    "too many docs": (lambda p: {**p, "n": MAX_DOCS + 1}, f"limit is {MAX_DOCS}"),
    "negative n": (lambda p: {**p, "n": -1}, "non-negative"),
    "too-long query": (lambda p: {**p, "query_tokens": ["a"] * (QUERY_LEN + 1)}, "truncate"),
    "empty query": (lambda p: {**p, "query_tokens": []}, "no tokens"),
    "query not strings": (lambda p: {**p, "query_tokens": [1, 2]}, "list of strings"),
    "unknown lex": (
        lambda p: {**p, "lex_names": ["abstract_bm25", "title_idf_jaccard", "nope"]},
        "unknown Lex feature",
    ),
    "lex names vs columns": (lambda p: {**p, "lex_names": ["abstract_bm25"]}, r"expected \[3, 1\]"),
    "ids below padding": (lambda p: {**p, "doc_tokens": _array(np.full((3, 50), -7), "<i4", "zlib")}, "id -7"),
    "nan lex": (lambda p: {**p, "lex": _array(np.full((3, 3), np.nan), "<f4")}, "NaN"),
    "no stats version": (lambda p: {**p, "stats_version": ""}, "stats_version"),
    "stats build not text": (lambda p: {**p, "stats_build": 7}, "stats_build must be a string"),
    "missing array": (lambda p: {k: v for k, v in p.items() if k != "doc_tokens"}, "'doc_tokens' is missing"),
}


def test_a_payload_without_a_build_id_is_read_unchecked(stats):
    payload = _good(stats)
    del payload["stats_build"]
    assert decode(payload).stats_build == ""


@pytest.mark.parametrize("case", sorted(BAD_PAYLOADS))
def test_bad_payloads_say_what_is_wrong(stats, case):
    mutate, message = BAD_PAYLOADS[case]
    with pytest.raises(PayloadError, match=message):
        decode(mutate(_good(stats)))


def test_zlib_bomb_is_bounded(stats):
    payload = _good(stats)
    huge = base64.b64encode(zlib.compress(b"\0" * 50_000_000)).decode()
    with pytest.raises(PayloadError, match="holds 601 bytes"):
        decode({**payload, "doc_tokens": {**payload["doc_tokens"], "codec": "zlib", "b64": huge}})


def test_encode_refuses_a_bad_request(stats):
    request = build_request("breast cancer", [stats.doc_terms(0)], stats)
    wide = ScoreRequest(
        request.stats_version, request.query_tokens, np.zeros((1, 60), np.int32), request.lex, request.lex_names
    )
    with pytest.raises(PayloadError, match="int32 \\[n, 50\\]"):
        encode(wide)


def test_payload_and_celery_config_do_not_import_torch():
    """The gateway (and the round-trip benchmark, a client like it) build, encode and send without torch."""
    code = (
        "import sys, es_rerank.payload, worker.celery_app, benchmarks.roundtrip; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_result_scores_read_the_task_result_and_refuse_a_malformed_one():
    result = {"v": RESULT_VERSION, "scores": [0.5, -1.0, 2.0], "model": "delta-32-lex3", "took_ms": 3.0, "batch": 1}
    scores = result_scores(result, 3)
    assert scores.dtype == np.float32 and scores.tolist() == [0.5, -1.0, 2.0]
    with pytest.raises(PayloadError, match="result version 2.*same release"):
        result_scores({**result, "v": 2}, 3)
    with pytest.raises(PayloadError, match="result version True"):
        result_scores({**result, "v": True}, 3)
    with pytest.raises(PayloadError, match="result version 'list'"):
        result_scores([0.5, -1.0, 2.0], 3)
    for scores in ([0.5, -1.0], [0.5, float("nan"), 2.0], "abc", None, [[0.5], [1.0], [2.0]]):
        with pytest.raises(PayloadError, match="for 3 documents"):
            result_scores({**result, "scores": scores}, 3)


def test_token_ids_compressed_with_zlib_still_decode(stats):
    """The gateway sends the ids raw; a payload of an older gateway, its ids zlib-compressed, decodes the same."""
    payload = _good(stats)
    assert payload["doc_tokens"]["codec"] == "raw"
    ids = decode(payload).doc_tokens
    compressed = {**payload, "doc_tokens": _array(ids, "<i4", "zlib")}
    np.testing.assert_array_equal(decode(compressed).doc_tokens, ids)
