"""``esrr bench agreement``: the embedded index's top-k against Elasticsearch's on a tiny collection (both servers).

The NFCorpus figures (docs/operations.md) come from the same command on the real data.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.agreement import overlap
from tests.benchmarks.test_index_bench import _collection

pytestmark = pytest.mark.es

DOCS = [
    ("D1", "Statins and breast cancer", "Statin use may delay breast cancer recurrence."),
    ("D2", "Vitamin D and colorectal cancer", "Serum vitamin D lowers colorectal cancer risk."),
    ("D3", "Green tea", "Green tea catechins and the risk of stroke."),
]


@pytest.mark.parametrize(
    "first, second, expected",
    [
        (["a", "b"], ["b", "a"], 1.0),
        (["a", "b"], ["c"], 0.0),
        (["a", "b", "c", "d"], ["a", "x"], 0.25),
        ([], [], 1.0),
        (["a"], [], 0.0),
    ],
)
def test_overlap_is_the_shared_documents_over_the_longer_list(first, second, expected):
    assert overlap(first, second) == expected


def test_the_tiny_collection_agrees_on_both_models_and_the_index_is_deleted(
    esrr, es_url, es_client, tmp_path, es_backend
):
    if es_backend == "opensearch":
        pytest.skip("esrr bench agreement compares the embedded index with Elasticsearch (--es-url)")
    out = tmp_path / "agreement.json"
    result = esrr(
        "bench",
        "agreement",
        "--es-url",
        es_url,
        "--data",
        str(_collection(tmp_path / "data", DOCS, True)),
        "--k",
        "2",
        "--json-out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(out.read_text(encoding="utf-8"))
    assert (figures["queries"], figures["documents"]) == (3, 3)
    assert [row["embedded"][0] for row in figures["per_query"]] == ["D1", "D2", "D3"]  # each title finds its own
    assert figures["mean_overlap_text_field"] == 1.0
    assert not es_client.indices.get(index="esrr-agreement-*").body
