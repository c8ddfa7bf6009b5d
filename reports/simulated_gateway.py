"""What the simulated-user experiments under reports/ share: esrr commands run and logged, and a gateway started,
waited for and stopped once its event store holds every simulated impression.

Imported by ``reports/learning-floor/run.py`` and ``reports/interleaving-floor/run.py`` (each puts
``reports/`` on its path).
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ESRR = [sys.executable, "-c", "from es_rerank.cli import main; main()"]


def esrr(env: dict[str, str], *args: str, log: Path) -> str:
    """Run one esrr command, its output to ``log`` (and returned); stop the run if it fails."""
    run = subprocess.run([*ESRR, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(run.stdout, encoding="utf-8")
    if run.returncode:
        sys.exit(f"esrr {' '.join(args)} failed ({run.returncode}); see {log}")
    return run.stdout


def start_gateway(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    """`esrr serve` on ``port``, once it answers."""
    process = subprocess.Popen(
        [*ESRR, "serve", "--port", str(port)], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                if answer.status == 200:
                    return process
        except OSError:
            time.sleep(0.5)
        if process.poll() is not None:
            sys.exit(f"the gateway exited ({process.returncode}); see {log}")
    process.kill()
    sys.exit(f"the gateway did not answer within 120 s; see {log}")


def stored_impressions(store: Path) -> int:
    """How many impressions the event store holds."""
    if not store.is_file():
        return 0
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as db:
        return db.execute("SELECT count(*) FROM impressions").fetchone()[0]


def stop_gateway(process: subprocess.Popen, store: Path, expected: int) -> None:
    """Wait until the store holds ``expected`` impressions (the writer is asynchronous), then stop the gateway; stop
    the run if they are not all there."""
    deadline = time.monotonic() + 120
    while stored_impressions(store) < expected and time.monotonic() < deadline:
        time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
    if stored_impressions(store) < expected:
        sys.exit(f"the store holds {stored_impressions(store)} impressions, {expected} expected")
