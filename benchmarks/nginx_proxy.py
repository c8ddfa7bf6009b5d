"""Debian's nginx started on a loopback port in front of a running gateway, with ``deploy/nginx.conf``.

The same configuration file the compose stack runs, with its two names filled in (where
nginx listens, where the gateway is), written to a temporary prefix directory together
with nginx's pid file, temporary files and log. Used by ``esrr bench slow-clients
--through-nginx`` and by the tests (``tests/deploy/test_proxy.py``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from string import Template

NGINX_CONF = Path(__file__).resolve().parents[1] / "deploy" / "nginx.conf"
TEMPLATE_NAMES = ("ESRR_PROXY_LISTEN", "ESRR_PROXY_UPSTREAM")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class ProxyError(RuntimeError):
    """nginx cannot be started as asked; the message says why and what to do."""


def render_nginx_conf(listen: str, upstream: str, template: str | None = None) -> str:
    """``deploy/nginx.conf`` with ``ESRR_PROXY_LISTEN`` and ``ESRR_PROXY_UPSTREAM`` filled in (nginx's own
    ``$variables`` are left as they are)."""
    if template is None and not NGINX_CONF.is_file():
        raise ProxyError(f"{NGINX_CONF} is not there: run from a checkout of es-rerank, which holds deploy/")
    text = NGINX_CONF.read_text(encoding="utf-8") if template is None else template
    rendered = Template(text).safe_substitute(ESRR_PROXY_LISTEN=listen, ESRR_PROXY_UPSTREAM=upstream)
    if any("${" in line.split("#")[0] for line in rendered.splitlines()):
        raise ProxyError(
            f"{NGINX_CONF} names a ${{...}} other than {', '.join(TEMPLATE_NAMES)}; "
            "fill it in here and in docker-compose.yml's envsubst"
        )
    return rendered


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def nginx_executable() -> str:
    """The path of ``nginx``, or ``ProxyError`` saying how to install it."""
    found = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/sbin/nginx") if Path(path).is_file()), None
    )
    if found is None:
        raise ProxyError("nginx is not installed: apt-get install -y nginx (scripts/test.sh does this as root)")
    return found


@contextmanager
def nginx_in_front(upstream: str, port: int | None = None) -> Iterator[str]:
    """nginx on ``127.0.0.1:port`` (a free one if None) passing to ``upstream`` (``HOST:PORT``) until the block
    ends; yields its URL. ``ProxyError`` with nginx's log when it does not start."""
    port = port or free_loopback_port()
    with tempfile.TemporaryDirectory(prefix="esrr-nginx-") as prefix:
        conf = Path(prefix) / "nginx.conf"
        conf.write_text(render_nginx_conf(f"127.0.0.1:{port}", upstream), encoding="utf-8")
        log_path = Path(prefix) / "nginx.log"
        # Appended to: nginx opens /dev/stdout anew (O_APPEND) for its access log.
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [nginx_executable(), "-p", f"{prefix}/", "-e", "stderr", "-c", str(conf), "-g", "daemon off;"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_until_listening(process, port, log_path)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()  # nginx's fast shutdown
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_listening(process: subprocess.Popen, port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise ProxyError(
                f"nginx exited with {process.returncode} before it listened on 127.0.0.1:{port}:\n"
                f"{log_path.read_text(errors='replace')}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                raise ProxyError(
                    f"nginx did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S:.0f} s:\n"
                    f"{log_path.read_text(errors='replace')}"
                ) from None
            time.sleep(0.05)
