"""A PostgreSQL server from Debian's packages for the event store's tests, started once per session."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _as_owner(command: list[str]) -> list[str]:
    """``command`` as the postgres user when the tests run as root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="session")
def postgres_server(free_port: Callable[[], int]) -> Iterator[str]:
    """``postgresql://esrr@127.0.0.1:PORT``: a throw-away server (``apt-get install postgresql``); skipped without."""
    pytest.importorskip("psycopg", reason="needs psycopg: pip install 'es-rerank[postgres]'")
    binaries = _binaries()
    if binaries is None:
        pytest.skip("needs Debian's PostgreSQL: apt-get install postgresql")
    scratch = Path(tempfile.mkdtemp(prefix="esrr-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(scratch, "postgres")
    port = free_port()
    subprocess.run(
        _as_owner([str(binaries / "initdb"), "-D", str(scratch / "data"), "-A", "trust", "-U", "esrr"]),
        check=True,
        capture_output=True,
    )
    subprocess.run(
        _as_owner(
            [
                str(binaries / "pg_ctl"),
                "-D",
                str(scratch / "data"),
                "-w",
                "-l",
                str(scratch / "log"),
                "-o",
                f"-p {port} -k {scratch} -c listen_addresses=127.0.0.1 -c fsync=off",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://esrr@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_owner([str(binaries / "pg_ctl"), "-D", str(scratch / "data"), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str, request: pytest.FixtureRequest) -> str:
    """A new, empty database on the test server, for one test."""
    import psycopg

    name = "t_" + "".join(char if char.isalnum() else "_" for char in request.node.name.lower())[:50]
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{postgres_server}/{name}"
