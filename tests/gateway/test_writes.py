"""Which requests the read-only gateway refuses as writes (``es_rerank.gateway.writes``, pure)."""

from __future__ import annotations

import pytest

from es_rerank.gateway.writes import is_write


@pytest.mark.parametrize(
    "method, path, routed",
    [
        ("PUT", "/esrr-docs/_doc/1", True),
        ("POST", "/esrr-docs/_doc", False),
        ("DELETE", "/esrr-docs/_doc/1", True),
        ("POST", "/esrr-docs/_update/1", False),
        ("POST", "/_bulk", True),
        ("PUT", "/esrr-docs/_bulk", False),
        ("POST", "/esrr-docs/_delete_by_query", False),
        ("PUT", "/esrr-docs/_mapping", True),
        ("PUT", "/esrr-docs/_settings", False),
        ("POST", "/esrr-docs/_refresh", False),
        ("POST", "/_aliases", True),
        ("DELETE", "/esrr-docs", True),
        ("PUT", "/new-index", True),
        ("PUT", "/_cluster/settings", False),
        ("PUT", "/_ingest/pipeline/p", False),
        ("PATCH", "/anything/unrouted", False),
        ("PUT", "/_unknown", False),
    ],
)
def test_writes_and_administration_are_writes(method, path, routed):
    assert is_write(method, path, routed)


@pytest.mark.parametrize(
    "method, path, routed",
    [
        ("GET", "/esrr-docs/_doc/1", True),
        ("HEAD", "/esrr-docs", True),
        ("GET", "/_bulk", False),
        ("POST", "/_search/scroll", False),
        ("DELETE", "/_search/scroll", False),
        ("DELETE", "/_search/scroll/abc", False),
        ("POST", "/esrr-docs/_pit", False),
        ("DELETE", "/_pit", False),
        ("POST", "/esrr-docs/_field_caps", False),
        ("POST", "/esrr-docs/_explain/1", False),
        ("POST", "/_sql", False),
        ("PUT", "/_search", True),
        ("PUT", "/esrr-docs/_search", True),
        ("DELETE", "/_esrr/health", True),
        ("POST", "/metrics", True),
    ],
)
def test_reads_and_wrong_methods_on_the_gateways_apis_are_not(method, path, routed):
    assert not is_write(method, path, routed)
