"""A real Redis and real worker processes for the broker tests of every room.

The broker tests talk to a real Redis on 127.0.0.1 (the one on port 6379 when it
answers, else a ``redis-server`` started here on a free port) and to real
``celery -A worker.celery_app worker`` processes, never eager mode. A missing
Redis fails the session loudly: these tests are not optional.

Isolation on a shared Redis: a dedicated database number, a key prefix and a
queue name unique to the test session; the session's keys are deleted at the end.
Registered as a pytest plugin by the root conftest.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.artifact_home import Artifacts

REPO = Path(__file__).resolve().parents[1]
TEST_DB = 12  # a Redis database of its own, plus a per-session key prefix


def _redis_server(server: str, port: int, directory: Path) -> list[str]:
    """The command line of a throw-away ``redis-server`` on loopback that keeps nothing on disk."""
    return [
        server,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
    ]


def _answers(port: int) -> bool:
    import redis

    try:
        return bool(redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]) -> Iterator[str]:
    """A Redis URL on a database of our own: port 6379 if it answers, else one started here."""
    if _answers(6379):
        yield f"redis://127.0.0.1:6379/{TEST_DB}"
        return
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(
            "no Redis answers on 127.0.0.1:6379 and redis-server is not installed; "
            "install it (apt-get install -y redis-server) or start Redis on 127.0.0.1:6379"
        )
    directory = tmp_path_factory.mktemp("redis")
    port = free_port()
    done = subprocess.run(
        [*_redis_server(server, port, directory), "--daemonize", "yes", "--pidfile", str(directory / "redis.pid")],
        capture_output=True,
        text=True,
    )
    deadline = time.monotonic() + 10
    while not _answers(port):
        if done.returncode != 0 or time.monotonic() > deadline:
            pytest.fail(
                f"could not start redis-server on port {port} (exit {done.returncode}): {done.stdout} {done.stderr}"
            )
        time.sleep(0.05)
    try:
        yield f"redis://127.0.0.1:{port}/{TEST_DB}"
    finally:
        pid_file = directory / "redis.pid"
        if pid_file.is_file():
            os.kill(int(pid_file.read_text().strip()), 15)


class PrivateRedis:
    """A ``redis-server`` of one test's own, which ``freeze`` stops (SIGSTOP): connections open, nothing answers;
    ``kill_and_restart`` kills it (SIGKILL) and starts a new one, empty, on the same port."""

    def __init__(self, argv: list[str], port: int) -> None:
        self.argv, self.port, self.url = argv, port, f"redis://127.0.0.1:{port}/0"
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not _answers(self.port):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"redis-server did not start on port {self.port} (exit {process.poll()})")
            time.sleep(0.05)
        return process

    def freeze(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def kill_and_restart(self, down_s: float = 0.0) -> None:
        """SIGKILL, ``down_s`` seconds with nothing on the port, then a new, empty server there."""
        self.process.kill()
        self.process.wait(10)
        time.sleep(down_s)
        self.process = self._start()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only once continued
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def private_redis(free_port: Callable[[], int], tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis no other test uses, continued and stopped at the end whatever the test did to it."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed; install it (apt-get install -y redis-server)")
    port = free_port()
    redis = PrivateRedis(_redis_server(server, port, tmp_path), port)
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture(scope="session")
def key_prefix(redis_url: str) -> Iterator[str]:
    """A per-session Redis key prefix; the session's keys are deleted afterwards."""
    import redis

    prefix = f"esrr-test-{uuid.uuid4().hex[:8]}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.delete(*keys)


# -- workers --------------------------------------------------------------------------------


class WorkerProcess:
    """A real ``celery -A worker.celery_app worker`` subprocess."""

    def __init__(self, env: dict[str, str], log_path: Path, name: str) -> None:
        self.env, self.log_path, self.name = env, log_path, name
        self.process: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "worker.celery_app",
                "worker",
                "--hostname",
                self.name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel",
                "INFO",
            ],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.is_file() else ""

    def wait_ready(self, client, timeout: float = 90.0) -> WorkerProcess:
        """Until the worker answers a ping (it preloads the model before consuming)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"worker {self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
            if client.control.ping(destination=[self.name], timeout=0.5):
                return self
        pytest.fail(f"worker {self.name} not ready after {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no warm shutdown, nothing acknowledged or requeued by the worker itself."""
        self.process.kill()
        self.process.wait(10)

    def stop(self, cold: bool = False) -> None:
        """Warm shutdown (SIGTERM), or cold (SIGQUIT): over AMQP a warm one idles ~10 s in its poll."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGQUIT if cold else signal.SIGTERM)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


@dataclass
class BrokerSetup:
    """What a test needs to start workers and send them tasks."""

    artifacts: Artifacts
    redis_url: str
    key_prefix: str
    log_dir: Path

    def settings_env(self, queue: str, **overrides: object) -> dict[str, str]:
        values: dict[str, object] = {
            "home": self.artifacts.home,
            "broker_url": self.redis_url,
            "queue": queue,
            "broker_key_prefix": self.key_prefix,
            "device": os.environ.get("ESRR_TEST_DEVICE", "cpu"),
            "pool": "threads",
            "concurrency": 8,
            # Short Redis redelivery so a killed worker's tasks come back within seconds.
            "visibility_timeout_s": 4,
            "restore_interval_s": 0.5,
            "time_limit_s": 3,
            "soft_time_limit_s": 2,
            "batch_wait_ms": 20,
            "loglevel": "INFO",
        }
        values.update(overrides)
        return {f"ESRR_{key.upper()}": str(value) for key, value in values.items()}

    def settings(self, queue: str, **overrides: object):
        from worker.settings import WorkerSettings

        return WorkerSettings(
            **{key[len("ESRR_") :].lower(): value for key, value in self.settings_env(queue, **overrides).items()}
        )

    def client(self, queue: str, **overrides: object):
        """A sending-only Celery app with the worker's configuration."""
        from worker.celery_app import create_app

        return create_app(self.settings(queue, **overrides))

    @contextmanager
    def serving(self, name: str, **overrides: object) -> Iterator[tuple[str, object]]:
        """A worker on a queue of its own (``name`` and a random suffix), ready; yields (queue, sending client)."""
        queue = f"{name}-{uuid.uuid4().hex[:6]}"
        client = self.client(queue, **overrides)
        process = self.worker(queue, **overrides).start()
        try:
            process.wait_ready(client)
            yield queue, client
        finally:
            process.stop()
            client.close()

    def worker(self, queue: str, **overrides: object) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ESRR_")}
        env.update(self.settings_env(queue, **overrides))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        name = f"{queue}-{uuid.uuid4().hex[:6]}@localhost"
        # One log per worker: a test that starts a second worker on the queue keeps the first one's log.
        return WorkerProcess(env, self.log_dir / f"{name.split('@')[0]}.log", name)


@pytest.fixture(scope="session")
def broker(
    artifacts: Artifacts, redis_url: str, key_prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> BrokerSetup:
    return BrokerSetup(artifacts, redis_url, key_prefix, tmp_path_factory.mktemp("worker-logs"))


@dataclass
class RunningWorker:
    queue: str
    process: WorkerProcess
    client: object  # celery.Celery


@pytest.fixture(scope="session")
def running_worker(broker: BrokerSetup) -> Iterator[RunningWorker]:
    """One worker for the session's broker tests, on a queue of its own."""
    queue = f"rerank-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    process = broker.worker(queue).start()
    try:
        process.wait_ready(client)
        yield RunningWorker(queue, process, client)
    finally:
        process.stop()
