"""The scoring task end to end: real Redis, real worker processes (no eager mode).

The first tests check ``worker.runtime`` in this process against ``DeltaModel``
itself; the ``broker`` tests send payloads through Redis to ``celery worker``
subprocesses started by the fixtures in ``conftest.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from es_rerank.lex import LEX3
from es_rerank.payload import (
    DOC_LEN,
    TASK_NAME,
    PayloadError,
    ScoreRequest,
    WorkerSetupError,
    build_request,
    encode,
)

QUERIES = [
    "statin use and breast cancer survival",
    "vitamin D levels and colorectal cancer risk in 2010",
    "does dietary fiber lower heart disease mortality",
    "green tea and cancer prevention",
]
TIMEOUT = 30


def make_request(artifacts, query: str, rows: list[int]) -> ScoreRequest:
    stats = artifacts.stats
    return build_request(query, [stats.doc_terms(row) for row in rows], stats, LEX3)


def reference_scores(artifacts, request: ScoreRequest, checkpoint: Path | None = None) -> np.ndarray:
    """DeltaModel.forward on the same inputs, mapped to embedding rows independently."""
    import torch

    from worker.model import Checkpoint

    model = Checkpoint.load(checkpoint or artifacts.checkpoint_path).build_model(artifacts.vectors)
    terms = artifacts.stats.vocab.terms
    doc_rows = np.zeros((request.n, DOC_LEN), dtype=np.int64)
    for (i, j), term_id in np.ndenumerate(request.doc_tokens):
        if term_id >= 0:
            doc_rows[i, j] = artifacts.embedding_rows([terms[term_id]])[0]
    query_rows = np.zeros(model.config.query_len, dtype=np.int64)
    query_rows[: len(request.query_tokens)] = artifacts.embedding_rows(list(request.query_tokens))
    with torch.no_grad():
        scores = model(
            torch.from_numpy(doc_rows),
            torch.from_numpy(query_rows).expand(request.n, -1),
            torch.from_numpy(request.lex),
        )
    return scores.numpy()


def rows_for(artifacts, seed: int, n: int = 20) -> list[int]:
    return list(np.random.default_rng(seed).permutation(artifacts.stats.n_docs)[:n])


# -- in process ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runtime(broker):
    from worker.runtime import Runtime

    runtime = Runtime.load(broker.settings("unused"))
    yield runtime
    runtime.close()


def test_runtime_scores_equal_the_model(runtime, artifacts):
    request = make_request(artifacts, QUERIES[0], rows_for(artifacts, 0))
    np.testing.assert_allclose(
        runtime.score(request, timeout=TIMEOUT), reference_scores(artifacts, request), atol=1e-4, rtol=0
    )
    assert runtime.model_name == "delta-32-lex3"
    assert set(runtime.describe()) >= {"model", "embeddings", "statistics", "device"}


def test_runtime_maps_padding_and_unknown_words(runtime, artifacts):
    request = make_request(artifacts, "zzunknownword statin", rows_for(artifacts, 1, 3))
    query_rows, doc_rows, lex = runtime.prepare(request)
    assert query_rows.tolist()[:2] == [1, artifacts.embedding_rows(["statin"])[0]]  # unknown -> UNK
    assert (query_rows[2:] == 0).all()  # padded to M with PAD
    assert ((request.doc_tokens == -1) == (doc_rows == 0)).all()
    assert (doc_rows == 1).any()  # ~10% of the stats terms have no vector in the fixture
    assert lex is request.lex


def test_runtime_rejects_other_lex_features(runtime, artifacts):
    stats = artifacts.stats
    request = build_request(QUERIES[0], [stats.doc_terms(0)], stats, lex_names=("text_bm25",))
    with pytest.raises(PayloadError, match=r"trained with \['abstract_bm25'"):
        runtime.score(request)


def test_runtime_names_a_missing_statistics_version(runtime, artifacts):
    request = make_request(artifacts, QUERIES[0], [0, 1])
    other = ScoreRequest("v-missing", request.query_tokens, request.doc_tokens, request.lex, request.lex_names)
    with pytest.raises(WorkerSetupError, match=r"no statistics for index version 'v-missing'.*ESRR_HOME"):
        runtime.score(other)
    hostile = ScoreRequest("../v-test", request.query_tokens, request.doc_tokens, request.lex, request.lex_names)
    with pytest.raises(PayloadError, match="not a valid index version"):
        runtime.score(hostile)


def test_runtime_rejects_ids_beyond_the_vocabulary(runtime, artifacts):
    request = make_request(artifacts, QUERIES[0], [0])
    docs = request.doc_tokens.copy()
    docs[0, 0] = len(artifacts.stats.vocab) + 5
    with pytest.raises(PayloadError, match="different statistics"):
        runtime.score(ScoreRequest(request.stats_version, request.query_tokens, docs, request.lex, request.lex_names))


def test_runtime_reloads_a_version_built_again_under_its_name(broker, artifacts, corpus_documents, tmp_path):
    """A prune frees a version name and a build reuses it: the cached table of the old build must go."""
    import shutil

    from es_rerank.stats import build_stats
    from worker.runtime import Runtime, find_stats_dir

    home = shutil.copytree(artifacts.home, tmp_path / "home")
    runtime = Runtime.load(broker.settings("unused", home=home))
    try:
        version = artifacts.stats.version
        first = runtime.stats_table(version)
        assert runtime.stats_table(version) is first  # cached while the build stays
        directory = find_stats_dir(runtime.settings, version)
        shutil.rmtree(directory)
        assert runtime.stats_table(version) is first  # gone (a prune): a gateway may still search it
        directory.mkdir(parents=True)
        assert runtime.stats_table(version) is first  # being built again: not complete yet
        shutil.rmtree(directory)
        rebuilt = build_stats(version, corpus_documents[:3])
        rebuilt.save(directory)
        again = runtime.stats_table(version)
        assert len(again) == len(rebuilt.vocab) != len(first)
    finally:
        runtime.close()


def test_runtime_refuses_a_build_of_the_version_that_it_does_not_hold(broker, artifacts, corpus_documents, tmp_path):
    """A gateway and a worker that read different folders for one version name would map ids to the wrong words."""
    import dataclasses
    import shutil

    from es_rerank.stats import build_stats
    from worker.runtime import Runtime, find_stats_dir

    home = shutil.copytree(artifacts.home, tmp_path / "home")
    runtime = Runtime.load(broker.settings("unused", home=home))
    try:
        request = make_request(artifacts, QUERIES[0], [0, 1])
        assert request.stats_build == artifacts.stats.build_id
        assert len(runtime.score(request)) == 2
        directory = find_stats_dir(runtime.settings, artifacts.stats.version)
        shutil.rmtree(directory)
        rebuilt = build_stats(artifacts.stats.version, corpus_documents[:3])
        rebuilt.save(directory)  # the same name built again, with another vocabulary
        with pytest.raises(
            WorkerSetupError,
            match=rf"are build {request.stats_build}, but no folder .* holds it "
            rf"\(this worker's are build {rebuilt.build_id}.*one ESRR_HOME",
        ):
            runtime.score(request)
        newer = make_request(artifacts, QUERIES[0], [0, 1])
        newer = dataclasses.replace(
            newer, doc_tokens=np.minimum(newer.doc_tokens, len(rebuilt.vocab) - 1), stats_build=rebuilt.build_id
        )
        assert len(runtime.score(newer)) == 2
        assert len(runtime.score(dataclasses.replace(request, stats_build="", doc_tokens=newer.doc_tokens))) == 2
    finally:
        runtime.close()


def test_runtime_finds_the_build_asked_for_in_another_backends_folder(broker, artifacts, corpus_documents, tmp_path):
    """An embedded and an Elasticsearch index built under one version name: each gateway gets its own build."""
    import dataclasses
    import shutil

    from es_rerank.stats import build_stats
    from worker.runtime import Runtime

    home = shutil.copytree(artifacts.home, tmp_path / "home")
    other = build_stats(artifacts.stats.version, corpus_documents[:3])
    other.save(home / "indexes" / "elasticsearch" / artifacts.stats.version / "stats")
    runtime = Runtime.load(broker.settings("unused", home=home))  # ESRR_BACKEND: embedded
    try:
        embedded = make_request(artifacts, QUERIES[0], [0, 1])
        from_es = dataclasses.replace(
            embedded, doc_tokens=np.minimum(embedded.doc_tokens, len(other.vocab) - 1), stats_build=other.build_id
        )
        for request, vocabulary in [(embedded, artifacts.stats.vocab), (from_es, other.vocab), (embedded, None)]:
            assert len(runtime.score(request)) == 2
            if vocabulary is not None:
                assert len(runtime.stats_table(request.stats_version, request.stats_build)) == len(vocabulary)
    finally:
        runtime.close()


def test_runtime_setup_errors_name_the_fix(broker, tmp_path):
    from worker.runtime import Runtime

    with pytest.raises(WorkerSetupError, match="no model checkpoint.*ESRR_CHECKPOINT"):
        Runtime.load(broker.settings("unused", checkpoint=tmp_path / "none.pt"))
    with pytest.raises(WorkerSetupError, match="no embeddings version 'e-test'"):
        Runtime.load(broker.settings("unused", home=tmp_path, checkpoint=broker.artifacts.checkpoint_path))


# -- through Redis and a worker process -------------------------------------------------------


def send(client, queue: str, payload):
    return client.send_task(TASK_NAME, args=[payload], queue=queue)


@pytest.mark.broker
def test_round_trip_scores_equal_the_model_in_order(running_worker, artifacts):
    rows = rows_for(artifacts, 2)
    request = make_request(artifacts, QUERIES[1], rows)
    result = send(running_worker.client, running_worker.queue, encode(request)).get(timeout=TIMEOUT)
    assert result["v"] == 1 and result["model"] == "delta-32-lex3" and result["took_ms"] > 0
    scores = np.asarray(result["scores"], dtype=np.float32)
    expected = reference_scores(artifacts, request)
    np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=0)
    assert np.ptp(expected) > 0  # distinct scores, so the order check means something

    reversed_request = make_request(artifacts, QUERIES[1], rows[::-1])
    again = send(running_worker.client, running_worker.queue, encode(reversed_request)).get(timeout=TIMEOUT)
    np.testing.assert_allclose(again["scores"], scores[::-1], atol=1e-5, rtol=0)


@pytest.mark.broker
def test_bad_payload_gets_a_clear_error_and_the_worker_stays_up(running_worker, artifacts):
    client, queue = running_worker.client, running_worker.queue
    good = encode(make_request(artifacts, QUERIES[2], rows_for(artifacts, 3, 5)))
    with pytest.raises(PayloadError, match="payload version 7.*same release"):
        send(client, queue, {**good, "v": 7}).get(timeout=TIMEOUT)
    with pytest.raises(PayloadError, match=r"doc_tokens has shape \[5, 50\], expected \[6, 50\]"):
        send(client, queue, {**good, "n": 6}).get(timeout=TIMEOUT)
    with pytest.raises(WorkerSetupError, match="no statistics for index version 'v-other'"):
        send(client, queue, {**good, "stats_version": "v-other"}).get(timeout=TIMEOUT)
    result = send(client, queue, good).get(timeout=TIMEOUT)
    assert len(result["scores"]) == 5
    assert running_worker.process.process.poll() is None


@pytest.mark.broker
def test_the_worker_logs_a_summary_of_each_task_and_a_refusal_without_a_traceback(running_worker, artifacts):
    client, queue = running_worker.client, running_worker.queue
    good = encode(make_request(artifacts, QUERIES[3], rows_for(artifacts, 4, 7)))
    scored = send(client, queue, good)
    scores = scored.get(timeout=TIMEOUT)["scores"]
    refused = send(client, queue, {**good, "v": True})
    with pytest.raises(PayloadError, match="payload version True"):
        refused.get(timeout=TIMEOUT)
    deadline, log = time.monotonic() + 10, ""
    while time.monotonic() < deadline and refused.id not in log:  # the worker's log is written as it goes
        time.sleep(0.1)
        log = running_worker.process.log_path.read_text(errors="replace")
    mine = [line for line in log.splitlines() if scored.id in line or refused.id in line]
    assert any(f"[{scored.id}] scored 7 documents with delta-32-lex3 in" in line for line in mine), mine
    assert not any(repr(scores[0]) in line or "succeeded in" in line for line in mine), mine
    refusal = log[log.index(f"[{refused.id}] raised") :]
    assert "raised expected: PayloadError" in refusal and "Traceback" not in refusal.split("\n", 2)[1]


@pytest.mark.broker
def test_concurrent_requests_are_coalesced(running_worker, artifacts):
    requests = [make_request(artifacts, QUERIES[i % len(QUERIES)], rows_for(artifacts, 10 + i, 12)) for i in range(8)]
    pending = [send(running_worker.client, running_worker.queue, encode(r)) for r in requests]
    results = [p.get(timeout=TIMEOUT) for p in pending]
    for request, result in zip(requests, results):
        np.testing.assert_allclose(result["scores"], reference_scores(artifacts, request), atol=1e-4, rtol=0)
    assert max(r["batch"] for r in results) >= 2, [r["batch"] for r in results]


@pytest.mark.broker
def test_a_killed_worker_loses_no_task(broker, artifacts):
    """SIGKILL a worker mid-task; a new worker gets the unacknowledged tasks (acks_late)."""
    queue = f"rerank-kill-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    first = broker.worker(queue, score_delay_ms=1500).start()
    second = None
    try:
        first.wait_ready(client)
        requests = [make_request(artifacts, QUERIES[i], rows_for(artifacts, 20 + i, 8)) for i in range(4)]
        pending = [send(client, queue, encode(r)) for r in requests]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the worker is running them and holds all of them
            active = client.control.inspect(destination=[first.name], timeout=0.5).active() or {}
            if active.get(first.name) and _delivered_unacked(client, queue) == len(pending):
                break
        else:
            pytest.fail(f"the worker never started and held all the tasks:\n{first.log_tail()}")
        first.kill()
        assert not any(p.ready() for p in pending), "tasks finished before the kill; raise score_delay_ms"
        _hold_redelivery_lock_as_a_dead_worker(client)

        second = broker.worker(queue).start()
        second.wait_ready(client)
        for request, p in zip(requests, pending):
            result = p.get(timeout=TIMEOUT)
            np.testing.assert_allclose(result["scores"], reference_scores(artifacts, request), atol=1e-4, rtol=0)
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.broker
def test_a_worker_serves_an_ensemble_named_in_the_checkpoint_setting(broker, artifacts, tmp_path):
    """ESRR_CHECKPOINT=a,b: the worker process answers with the members' standardised mean."""
    from worker.ensemble import ensemble_scores

    second = artifacts.another_checkpoint(tmp_path / "delta-32-lex3-seed2.pt")
    queue = f"rerank-ensemble-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue)
    process = broker.worker(queue, checkpoint=f"{artifacts.checkpoint_path},{second}").start()
    try:
        process.wait_ready(client)
        requests = [make_request(artifacts, QUERIES[i], rows_for(artifacts, 40 + i, 9)) for i in range(2)]
        pending = [send(client, queue, encode(r)) for r in requests]
        for request, p in zip(requests, pending):
            result = p.get(timeout=TIMEOUT)
            members = [[reference_scores(artifacts, request, path)] for path in (artifacts.checkpoint_path, second)]
            np.testing.assert_allclose(result["scores"], ensemble_scores(members)[0], atol=1e-4, rtol=0)
            assert result["model"] == "delta-32-lex3+delta-32-lex3-seed2"
    finally:
        process.stop()


@pytest.mark.broker
def test_the_round_trip_benchmark_times_every_request(running_worker, artifacts):
    from benchmarks.roundtrip import measure_round_trips

    payloads = [
        encode(make_request(artifacts, QUERIES[i % len(QUERIES)], rows_for(artifacts, 50 + i, 6))) for i in range(6)
    ]
    for concurrency in (1, 3):
        row = measure_round_trips(running_worker.client, running_worker.queue, payloads, concurrency, TIMEOUT)
        assert (row.concurrency, row.requests) == (concurrency, 6)
        assert 0 < row.worker_p50_ms <= row.p50_ms <= row.p99_ms
        assert 1 <= row.mean_batch <= concurrency and row.per_second > 0


def _delivered_unacked(client, queue: str) -> int:
    """Tasks of ``queue`` a worker holds unacknowledged, or 0 while any is still queued.

    kombu's Redis transport takes a message with RPOP and only then records it as
    unacknowledged; a worker killed between the two loses that message (celery/celery#7950,
    a limit of the transport, see the README). The kill test therefore kills only once
    every task is recorded, which is what acks_late and redelivery guarantee to survive.
    """
    with client.connection_for_write() as connection:
        channel = connection.default_channel
        if channel.client.llen(queue):
            return 0
        redis = channel.client  # kombu's key-prefixing client: only some commands (ZRANGE, HGET) get the prefix
        tags = redis.zrange(channel.unacked_index_key, 0, -1)
        entries = [redis.hget(channel.unacked_key, tag) for tag in tags]  # None once acknowledged meanwhile
        return sum(json.loads(entry)[2] == queue for entry in entries if entry)  # [message, exchange, routing key]


def _hold_redelivery_lock_as_a_dead_worker(client) -> None:
    """Take kombu's redelivery lock with the worker's expiry, as a worker killed mid-sweep leaves it.

    The first worker sweeps every ``restore_interval_s``; a SIGKILL inside a sweep
    leaves the lock held. Holding it here makes that race the test's every run
    (``acquire`` returns False when the dead worker really did hold it).
    """
    with client.connection_for_write() as connection:
        channel = connection.default_channel
        channel.client.lock(channel.unacked_mutex_key, timeout=channel.unacked_mutex_expire).acquire(blocking=False)


RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # Debian's rabbitmq-server, started here as a node


@pytest.fixture(scope="module")
def rabbitmq_url(tmp_path_factory, free_port) -> Iterator[str]:
    """``ESRR_TEST_AMQP_URL``, else a throw-away RabbitMQ node of Debian's package on free ports (``scripts/test.sh``
    installs it); in CI a node that cannot start fails the test, elsewhere it is skipped."""
    url = os.environ.get("ESRR_TEST_AMQP_URL")
    if url:
        yield url
        return
    if not RABBITMQ_SERVER.is_file():
        _no_rabbitmq(f"{RABBITMQ_SERVER} is missing: apt-get install rabbitmq-server (scripts/test.sh does as root)")
    scratch = tmp_path_factory.mktemp("rabbitmq")
    port, dist_port = free_port(), free_port()
    (scratch / "plugins").write_text("[].\n")
    (scratch / "rabbitmq.conf").write_text("")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),  # its Erlang cookie lives there
        "RABBITMQ_NODENAME": f"esrr-{port}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(scratch / "mnesia"),
        "RABBITMQ_LOG_BASE": str(scratch / "log"),
        "RABBITMQ_CONFIG_FILE": str(scratch / "rabbitmq"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(scratch / "plugins"),
        "RABBITMQ_PID_FILE": str(scratch / "pid"),
    }
    with open(scratch / "out.log", "wb") as log:
        node = subprocess.Popen(
            [str(RABBITMQ_SERVER)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 60
        while not _accepts(port):
            if node.poll() is not None or time.monotonic() > deadline:
                _no_rabbitmq(f"RabbitMQ did not start within 60 s: {(scratch / 'out.log').read_text()[-800:]}")
            time.sleep(0.5)
        yield f"amqp://guest:guest@127.0.0.1:{port}//"
    finally:
        os.killpg(node.pid, signal.SIGTERM)  # the node and the epmd it started for itself
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(node.pid, signal.SIGKILL)
            node.wait(10)


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _no_rabbitmq(reason: str) -> None:
    """Fail in CI, where the RabbitMQ test must run; skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.mark.broker
def test_rabbitmq_needs_only_the_broker_url(broker, artifacts, rabbitmq_url):
    """The same worker over RabbitMQ (results over rpc://), changing ESRR_BROKER_URL only."""
    url = rabbitmq_url
    queue = f"rerank-amqp-{uuid.uuid4().hex[:6]}"
    client = broker.client(queue, broker_url=url)
    assert client.conf.result_backend == "rpc://"
    process = broker.worker(queue, broker_url=url).start()
    try:
        process.wait_ready(client)
        request = make_request(artifacts, QUERIES[3], rows_for(artifacts, 30, 10))
        result = send(client, queue, encode(request)).get(timeout=TIMEOUT)
        np.testing.assert_allclose(result["scores"], reference_scores(artifacts, request), atol=1e-4, rtol=0)
        with pytest.raises(PayloadError, match="payload version"):
            send(client, queue, {"v": 0}).get(timeout=TIMEOUT)
    finally:
        process.stop(cold=True)  # every task is answered; a warm shutdown would idle ~10 s
        with client.connection_for_write() as connection:
            connection.default_channel.queue_delete(queue)
