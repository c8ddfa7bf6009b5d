"""The server version ``VersionedTransport`` reads, the media types it sends each version, and too-old servers.

Against real Elasticsearch 7.17 the whole backend suite runs with these headers (``es_url[es7]``);
here the pure parts, and a server older than 7.14 (a stub: no such engine is started here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from es_rerank.backends.base import BackendError
from es_rerank.backends.elasticsearch import ElasticsearchBackend, connect
from es_rerank.backends.es_server import headers_for, server_version
from es_rerank.settings import CommonSettings

COMPAT_8 = "application/vnd.elasticsearch+json; compatible-with=8"
NDJSON_8 = "application/vnd.elasticsearch+x-ndjson; compatible-with=8"


@pytest.mark.parametrize("body, version", [
    ({"version": {"number": "7.17.28"}}, (7, 17)),
    ({"version": {"number": "8.19.3-SNAPSHOT"}}, (8, 19)),
    ({"version": {"number": "2.19.3", "distribution": "opensearch"}}, (2, 19)),
    ({"version": {}}, None),
    ({"tagline": "You Know, for Search"}, None),
    ("not json", None),
])
def test_the_version_is_read_from_the_root_answer(body, version):
    assert server_version(body) == version


def test_a_7x_server_gets_plain_media_types_and_an_8x_the_clients_own():
    headers = {"accept": COMPAT_8, "content-type": NDJSON_8, "authorization": "ApiKey abc"}
    assert headers_for(7, headers) == {"accept": "application/json", "content-type": "application/x-ndjson",
                                       "authorization": "ApiKey abc"}
    assert headers_for(8, headers) == headers
    assert headers_for(9, headers) == headers


@pytest.mark.parametrize("number", ["7.10.2", "6.8.23"])
def test_a_server_older_than_7_14_is_refused_with_its_version(es_stub: Callable[..., str], tmp_path: Path,
                                                              number: str) -> None:
    url = es_stub(200, {"name": "old", "version": {"number": number}, "tagline": "You Know, for Search"})
    settings = CommonSettings(home=tmp_path, backend="elasticsearch", es_url=url)
    with pytest.raises(BackendError, match=rf"Elasticsearch {number}, older than 7\.14, the oldest esrr talks to .*"
                                           r"upgrade the cluster to 7\.17 or 8\.x"):
        ElasticsearchBackend.from_settings(settings)
    assert connect(settings).transport.server_major is None  # nothing decided about a server that was refused
