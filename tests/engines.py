"""A real Elasticsearch or OpenSearch node for a test session, started by ``scripts/engine.sh``.

``start_engine`` resolves the jars once (Maven, cached in ``engines/target`` and ``~/.m2``; not
counted in the start time), starts the node with its standard input a pipe (the launcher stops
the node when that pipe closes, so a test session that dies takes its node with it) and returns
once the launcher prints its READY line. ``stop`` closes the pipe, then SIGTERMs the process group.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE_SCRIPT = ROOT / "scripts" / "engine.sh"
START_TIMEOUT_S = 30.0  # the ceiling for an engine's start; the first resolve of its jars is extra
PREPARE_TIMEOUT_S = 600.0
_READY = re.compile(r"^ESRR-ENGINE READY (\S+) (\S+) (http://\S+) (.+)$", re.MULTILINE)


class EngineUnavailable(RuntimeError):
    """The engine cannot be started here: Java or Maven is missing (a skip outside CI)."""


class EngineFailed(RuntimeError):
    """The engine was started and failed: a resolve error, an exit, or no READY line in time (always a failure)."""


@dataclass
class Engine:
    """A running node: its URL, version, how long it took to answer, and the process to stop."""

    engine: str
    version: str
    url: str
    home: Path  # the node's temporary folder, deleted when it stops
    start_s: float
    process: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        """Close the node's standard input (it stops itself), then SIGTERM its group if it is still there."""
        _stop(self.process)


def missing_tools() -> list[str]:
    """Which of the programs ``scripts/engine.sh`` needs are not on PATH."""
    return [tool for tool in ("java", "javac", "mvn", "flock") if shutil.which(tool) is None]


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=20)
        return
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, limit: int = 4000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-limit:] if path.exists() else ""


def start_engine(engine: str, work_dir: Path, *launcher_args: str) -> Engine:
    """Start ``engine`` (elasticsearch or opensearch) on a free loopback port; ``EngineUnavailable`` without Java
    or Maven, ``EngineFailed`` when it does not answer within ``START_TIMEOUT_S``."""
    if missing := missing_tools():
        raise EngineUnavailable(
            f"{', '.join(missing)} not on PATH: apt-get install -y openjdk-17-jdk-headless "
            "maven (scripts/test.sh does so when it runs as root)"
        )
    prepare_log = work_dir / f"{engine}-prepare.log"
    with prepare_log.open("wb") as log:
        try:
            prepared = subprocess.run(
                ["bash", str(ENGINE_SCRIPT), "prepare", engine],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=PREPARE_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise EngineFailed(
                f"resolving {engine}'s jars took over {PREPARE_TIMEOUT_S:.0f} s:\n{_tail(prepare_log)}"
            ) from None
    if prepared.returncode != 0:
        raise EngineFailed(f"`scripts/engine.sh prepare {engine}` exited {prepared.returncode}:\n{_tail(prepare_log)}")
    log_path = work_dir / f"{engine}.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["bash", str(ENGINE_SCRIPT), engine, "--stop-on-stdin-eof", *launcher_args],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    while time.monotonic() - started < START_TIMEOUT_S and process.poll() is None:
        if ready := _READY.search(_tail(log_path, 1 << 20)):
            return Engine(
                ready.group(1),
                ready.group(2),
                ready.group(3),
                Path(ready.group(4)),
                time.monotonic() - started,
                process,
                log_path,
            )
        time.sleep(0.1)
    _stop(process)
    state = f"exited with {process.returncode}" if process.returncode is not None else "did not answer"
    raise EngineFailed(f"{engine} {state} within {START_TIMEOUT_S:.0f} s of its start; its output:\n{_tail(log_path)}")


def in_ci() -> bool:
    """Whether this is a CI run (``CI`` set to anything but false), where a missing engine fails its tests."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def engine_for_tests(engine: str, work_dir: Path, *launcher_args: str) -> Engine:
    """``start_engine`` for a test: skipped without Java or Maven outside CI; a failure otherwise."""
    try:
        return start_engine(engine, work_dir, *launcher_args)
    except EngineUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI must test against real {engine}: {exc}", pytrace=False)
        pytest.skip(f"real {engine} cannot start here: {exc}")
    except EngineFailed as exc:
        pytest.fail(str(exc), pytrace=False)


def report(config: pytest.Config, line: str) -> None:
    """Write ``line`` to the test log past output capture (a start time, a count worth seeing in CI)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\n{line}")
