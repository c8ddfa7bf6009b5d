"""The pure parts of ``esrr bench slow-clients`` and of the nginx configuration it renders."""

from __future__ import annotations

import pytest

from benchmarks.nginx_proxy import ProxyError, render_nginx_conf
from benchmarks.slow_clients import percentile, summarise, trickled_bytes


def test_an_unanswered_search_counts_as_the_slowest():
    times = [5.0, None, 7.0, 6.0]
    assert percentile(times, 0.5) == 6.0 and percentile(times, 0.75) == 7.0 and percentile(times, 0.99) is None
    assert percentile([], 0.99) is None
    assert summarise(times) == {"searches": 4, "answered": 3, "p50_ms": 6.0, "p99_ms": None, "max_ms": 7.0}


def test_trickled_requests_never_end():
    prefix, request = trickled_bytes("trickle-headers")
    assert prefix == b"" and request.startswith(b"GET /_search") and b"\r\n\r\n" not in request
    prefix, request = trickled_bytes("trickle-body")
    assert prefix.endswith(b"Content-Length: 100000\r\n\r\n") and request == b" "
    with pytest.raises(ValueError, match="half-sent"):
        trickled_bytes("half-sent")


def test_the_nginx_conf_gets_its_two_names_and_keeps_nginxs_variables():
    rendered = render_nginx_conf("127.0.0.1:8080", "127.0.0.1:9200")
    assert "listen 127.0.0.1:8080 backlog=4096;" in rendered and "server 127.0.0.1:9200;" in rendered
    assert "$proxy_add_x_forwarded_for" in rendered and "${" not in rendered
    with pytest.raises(ProxyError, match="ESRR_PROXY_LISTEN"):
        render_nginx_conf("8080", "gateway:8000", template="listen ${ESRR_PROXY_LISTEN};\nroot ${SOMETHING};\n")
