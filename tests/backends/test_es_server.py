"""The server version ``VersionedTransport`` reads, the media types the servers take, and too-old servers.

The whole backend suite runs on real Elasticsearch 7.17 with the 8.x client's own headers
(``es_url[es7]``); here the version read, and a server older than 7.14 (a stub: no such
engine is started here).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from es_rerank.backends.base import BackendError
from es_rerank.backends.elasticsearch import ElasticsearchBackend
from es_rerank.backends.es_client import connect
from es_rerank.backends.es_server import server_version
from es_rerank.settings import CommonSettings

COMPAT_8 = "application/vnd.elasticsearch+json; compatible-with=8"


@pytest.mark.parametrize(
    "body, version",
    [
        ({"version": {"number": "7.17.28"}}, (7, 17)),
        ({"version": {"number": "8.19.3-SNAPSHOT"}}, (8, 19)),
        ({"version": {"number": "2.19.3", "distribution": "opensearch"}}, (2, 19)),
        ({"version": {}}, None),
        ({"tagline": "You Know, for Search"}, None),
        ("not json", None),
    ],
)
def test_the_version_is_read_from_the_root_answer(body, version):
    assert server_version(body) == version


def test_the_server_takes_the_clients_own_media_types_and_its_major_version_is_read(es_url, es_client, es_backend):
    """Elasticsearch 7.17 answers the 8.x client's compatible-with=8 requests (nothing is rewritten for it);
    OpenSearch refuses them (406), which is why its backend talks through opensearch-py."""
    body = json.dumps({"query": {"match_all": {}}, "size": 0}).encode()
    request = urllib.request.Request(
        f"{es_url}/_search", data=body, method="POST", headers={"Accept": COMPAT_8, "Content-Type": COMPAT_8}
    )
    number = es_client.info()["version"]["number"]
    if es_backend == "opensearch":
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 406
        assert es_client.server_version == tuple(int(part) for part in number.split(".")[:2])
        return
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200 and "hits" in json.loads(response.read())
    assert es_client.transport.server_major == int(number.split(".")[0])


@pytest.mark.parametrize("number", ["7.10.2", "6.8.23"])
def test_a_server_older_than_7_14_is_refused_with_its_version(
    es_stub: Callable[..., str], tmp_path: Path, number: str
) -> None:
    url = es_stub(200, {"name": "old", "version": {"number": number}, "tagline": "You Know, for Search"})
    settings = CommonSettings(home=tmp_path, backend="elasticsearch", es_url=url)
    with pytest.raises(
        BackendError,
        match=rf"Elasticsearch {number}, older than 7\.14, the oldest esrr talks to .*"
        r"upgrade the cluster to 7\.17 or 8\.x",
    ):
        ElasticsearchBackend.from_settings(settings)
    assert connect(settings).transport.server_major is None  # nothing decided about a server that was refused
