"""Debian's nginx with ``deploy/nginx.conf`` before a real ``esrr serve``: slow clients hold nginx, not the gateway.

The gateway here allows only 20 connections (``ESRR_GATEWAY_CONNECTION_LIMIT``), so that a
few dozen trickling clients, scaled down from the 1,000 of ``esrr bench slow-clients``,
would lock it out if they reached it; the control test shows they do when sent to it
directly. nginx must be installed (``scripts/test.sh`` installs it as root); without it
these tests fail with the command to run.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from click.testing import CliRunner

from benchmarks.nginx_proxy import nginx_in_front
from benchmarks.slow_clients import Trickler, time_searches
from es_rerank.cli import main
from index_setup.embedded_index import build_embedded_index
from tests.conftest import TINY_DOCS, esrr_serve

pytestmark = pytest.mark.proxy

GATEWAY_CONNECTIONS = 20
TRICKLERS = 60  # three times what the gateway takes
OPEN_TIMEOUT_S = 60.0  # generous: every trickling connection must be open before the searches


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, free_port) -> Iterator[tuple[str, int]]:
    """``esrr serve`` on the tiny corpus without a model, taking at most 20 connections: its host and port."""
    home = tmp_path_factory.mktemp("proxied")
    build_embedded_index(list(TINY_DOCS), home / "indexes" / "embedded", version="v1", progress=False)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ESRR_")}, "ESRR_HOME": str(home),
           "ESRR_GATEWAY_RERANK": "false", "ESRR_GATEWAY_CONNECTION_LIMIT": str(GATEWAY_CONNECTIONS)}
    port = free_port()
    with esrr_serve(env, port):
        yield "127.0.0.1", port


def _trickling(url: str, pattern: str) -> Trickler:
    host, port = url.removeprefix("http://").split(":")
    return Trickler(host, int(port), TRICKLERS, interval=0.2, pattern=pattern)


def _all_open(trickler: Trickler) -> None:
    if not trickler.all_opened.wait(OPEN_TIMEOUT_S):
        pytest.fail(f"only {trickler.counts.open_now} of {TRICKLERS} trickling connections opened within "
                    f"{OPEN_TIMEOUT_S:.0f} s: {trickler.counts}")


def test_trickling_clients_sent_to_the_gateway_itself_lock_it_out(gateway):
    host, port = gateway
    url = f"http://{host}:{port}"
    with _trickling(url, "trickle-body") as trickler:
        _all_open(trickler)
        assert time_searches(url, 1, timeout=3) == [None]
    assert time_searches(url, 1, timeout=30)[0] is not None  # and it serves again once they are gone


@pytest.mark.parametrize("pattern", ["trickle-headers", "trickle-body"])
def test_searches_answer_through_nginx_while_clients_trickle(gateway, pattern):
    host, port = gateway
    with nginx_in_front(f"{host}:{port}") as proxy, _trickling(proxy, pattern) as trickler:
        _all_open(trickler)
        trickler.all_opened.clear()
        assert trickler.all_opened.wait(OPEN_TIMEOUT_S)  # a few more bytes each
        times = time_searches(proxy, 5, timeout=30)
        direct = time_searches(f"http://{host}:{port}", 1, timeout=30)  # nginx passed none of them on
        counts = trickler.counts
    assert None not in times, times
    assert direct[0] is not None
    assert counts.open_now == TRICKLERS and counts.bytes_sent >= 2 * TRICKLERS, counts


def test_nginx_refusals_are_in_elasticsearchs_error_shape(gateway, free_port):
    host, port = gateway
    with nginx_in_front(f"{host}:{port}") as proxy:
        body_error = _announced_body_error(proxy, 2 << 20)
        url_error = _error(urllib.request.Request(f"{proxy}/_search?q={'a' * 20_000}"))
        gateway_url_error = _error(urllib.request.Request(f"{proxy}/_search?q={'a' * 10_000}"))
    with nginx_in_front(f"127.0.0.1:{free_port()}") as proxy:  # nothing listens there
        gone_error = _error(urllib.request.Request(f"{proxy}/_search?q=bone"))
    assert body_error[0] == 413 and "client_max_body_size" in body_error[1]["error"]["reason"]
    assert url_error[0] == 414 and "large_client_header_buffers" in url_error[1]["error"]["reason"]
    assert gateway_url_error[0] == 414 and "ESRR_GATEWAY_MAX_URL_BYTES" in gateway_url_error[1]["error"]["reason"]
    assert gone_error[0] == 502 and "esrr serve" in gone_error[1]["error"]["reason"]
    for status, body in (body_error, url_error, gone_error):
        assert body["status"] == status and body["error"]["root_cause"][0]["type"]


def _announced_body_error(url: str, length: int) -> tuple[int, dict]:
    """The answer to a search announcing a ``length``-byte body, before any of it is sent."""
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    try:
        connection.putrequest("POST", "/_search")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(length))
        connection.endheaders()
        response = connection.getresponse()
        assert response.getheader("Content-Type") == "application/json"
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _error(request: urllib.request.Request) -> tuple[int, dict]:
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as error:
        assert error.headers["Content-Type"] == "application/json"
        return error.code, json.loads(error.read())
    pytest.fail(f"{request.full_url[:80]} was answered, not refused")


def test_bench_slow_clients_through_nginx_reports_the_probe_before_and_during(gateway, tmp_path: Path):
    host, port = gateway
    figures = tmp_path / "slow.json"
    result = CliRunner().invoke(main, ["bench", "slow-clients", "--url", f"http://{host}:{port}", "--through-nginx",
                                       "--pattern", "trickle-headers", "--connections", str(TRICKLERS),
                                       "--interval", "0.2", "--duration", "1", "--baseline", "0.5",
                                       "--json-out", str(figures)])
    assert result.exit_code == 0, result.output
    report = json.loads(figures.read_text())
    assert report["through"].startswith("nginx") and report["url"] != report["gateway"]
    assert report["trickle"]["open_now"] == TRICKLERS and report["trickle"]["open_min"] == TRICKLERS
    for phase in ("before", "during"):
        assert report[phase]["searches"] >= 1 and report[phase]["answered"] == report[phase]["searches"]
        assert report[phase]["p99_ms"] is not None
    assert f"{TRICKLERS} of {TRICKLERS} open at the end" in result.output
