"""Fixtures of the worker tests: a tiny artifact home, a real Redis, real worker processes.

The broker tests talk to a real Redis on 127.0.0.1 (the one on port 6379 when it
answers, else a ``redis-server`` started here on a free port) and to real
``celery -A worker.celery_app worker`` processes, never eager mode. A missing
Redis fails the session loudly: these tests are not optional.

Isolation on a shared Redis: a dedicated database number, a key prefix and a
queue name unique to the test session; the session's keys are deleted at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from es_rerank.lex import LEX3
from es_rerank.settings import DEFAULT_NFCORPUS
from es_rerank.stats import CorpusStats, Document, build_stats
from es_rerank.versions import write_pointer
from index_setup.readers import read_beir_corpus

REPO = Path(__file__).resolve().parents[2]
TEST_DB = 12  # a Redis database of its own, plus a per-session key prefix
STATS_VERSION = "v-test"
EMBEDDINGS_VERSION = "e-test"
DIM = 300

FALLBACK_DOCS = [  # used when the NFCorpus file of ../shared/data is not there (CI without data)
    ("D1", "Statin use and breast cancer survival", "Statins may delay breast cancer recurrence in 2005 cohorts."),
    (
        "D2",
        "Vitamin D and colorectal cancer",
        "Serum vitamin D levels of 30 ng/ml lower colorectal cancer risk by 12%.",
    ),
    ("D3", "Dietary fiber and heart disease", "High fiber intake reduces the risk of coronary heart disease."),
    ("D4", "Red meat consumption and mortality", "Processed red meat raises all-cause mortality in 1990s studies."),
    ("D5", "Green tea catechins", "Green tea catechins show antioxidant effects; EGCG at 0.5 mg."),
    ("D6", "IL-6 in inflammation", "Interleukin IL-6 and TNF-α mediate inflammation after infection."),
    ("D7", "Soy isoflavones and breast cancer", "Soy intake is associated with lower breast cancer recurrence."),
    ("D8", "Omega-3 fatty acids", "Fish oil omega-3 supplements and cardiovascular events: a meta-analysis."),
    ("D9", "Sugar-sweetened beverages", "Sugar drinks increase type 2 diabetes risk by 26% per serving."),
    ("D10", "Exercise and depression", "Aerobic exercise reduces depressive symptoms in older adults."),
    ("D11", "Arsenic in rice", "Rice contains inorganic arsenic; cooking in excess water lowers it."),
    ("D12", "Coffee and liver disease", "Coffee drinking is inversely associated with liver cirrhosis."),
]


def read_documents(limit: int) -> list[Document]:
    """The first ``limit`` NFCorpus documents, or the fallback documents without the data."""
    path = DEFAULT_NFCORPUS / "corpus.jsonl.gz"
    if not path.is_file():
        return [Document(*row) for row in FALLBACK_DOCS][:limit]
    return list(itertools.islice(read_beir_corpus(path), limit))


@pytest.fixture(scope="session")
def corpus_documents() -> list[Document]:
    return read_documents(600)


@dataclass
class Artifacts:
    """A tiny ESRR_HOME: statistics, embeddings and a random-weight Delta-32-Lex3 checkpoint."""

    home: Path
    stats: CorpusStats
    words: list[str]  # embeddings vocabulary, row order
    vectors: np.ndarray  # float32 [n_words, DIM]
    checkpoint_path: Path

    def embedding_rows(self, tokens: list[str]) -> np.ndarray:
        """Rows of tokens, unknown -> 1, computed independently of the product code."""
        index = {word: row for row, word in enumerate(self.words)}
        return np.array([index.get(t, 1) for t in tokens], dtype=np.int64)

    def another_checkpoint(self, path: Path, seed: int = 1, **config_changes: object) -> Path:
        """Another random-weight model on the same embeddings (an ensemble member), saved at ``path``."""
        import torch

        from worker.model import Checkpoint, DeltaModel

        torch.manual_seed(seed)
        served = Checkpoint.load(self.checkpoint_path)
        config = replace(served.config, **config_changes)
        model = DeltaModel(config, self.vectors)
        Checkpoint(config, model.state_dict(), served.embeddings_version, served.stats_version).save(path)
        return path


def write_embeddings(directory: Path, words: list[str], vectors: np.ndarray, version: str) -> None:
    """An embeddings artifact in the agreed layout: vectors.npy, vocab.txt, meta.json."""
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "vectors.npy", vectors)
    (directory / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (directory / "meta.json").write_text(
        json.dumps({"format": 1, "version": version, "dim": int(vectors.shape[1]), "n_words": len(words)}),
        encoding="utf-8",
    )


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory, corpus_documents: list[Document]) -> Artifacts:
    import torch

    from worker.model import VARIANTS, Checkpoint, DeltaConfig, DeltaModel

    home = tmp_path_factory.mktemp("esrr-home")
    stats = build_stats(STATS_VERSION, corpus_documents[:30])
    stats.save(home / "indexes" / "embedded" / STATS_VERSION / "stats")
    stats = CorpusStats.load(home / "indexes" / "embedded" / STATS_VERSION / "stats")

    rng = np.random.default_rng(7)
    terms = list(stats.vocab.terms)
    rng.shuffle(terms)  # embedding rows in another order than stats ids
    kept = [t for i, t in enumerate(terms) if i % 10 != 3]  # ~10% of the terms have no vector: UNK
    words = ["<pad>", "<unk>", *kept, "zzextra1", "zzextra2"]
    vectors = rng.normal(0.0, 0.3, size=(len(words), DIM)).astype(np.float32)
    vectors[0] = 0.0
    vectors[1] = rng.uniform(-0.25, 0.25, size=DIM)
    write_embeddings(home / "embeddings" / EMBEDDINGS_VERSION, words, vectors, EMBEDDINGS_VERSION)

    torch.manual_seed(0)
    config = DeltaConfig(**VARIANTS["delta-32-lex3"])
    assert config.lex_names == LEX3
    model = DeltaModel(config, vectors)
    model.lex_mean.copy_(torch.tensor([3.0, 0.1, 0.2]))
    model.lex_std.copy_(torch.tensor([2.0, 0.2, 0.3]))
    state = {name: value.clone() for name, value in model.state_dict().items()}
    checkpoint_path = home / "models" / "delta-32-lex3.pt"
    Checkpoint(config, state, EMBEDDINGS_VERSION, STATS_VERSION).save(checkpoint_path)
    return Artifacts(home, stats, words, vectors, checkpoint_path)


# -- Redis ----------------------------------------------------------------------------------


def home_without_index(artifacts: Artifacts, tmp_path: Path) -> Path:
    """A copy of the artifacts' home whose embeddings are current, without any served index or votes."""
    home = tmp_path / "home"
    shutil.copytree(artifacts.home, home)
    shutil.rmtree(home / "indexes")
    (version,) = [d.name for d in (home / "embeddings").iterdir()]
    write_pointer(home / "embeddings", version)
    return home


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
