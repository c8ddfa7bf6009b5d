"""A worker whose Redis is killed and started again: it reconnects and answers, it does not exit.

Real ``redis-server`` (SIGKILL, then a new empty one on the same port) and a real
``celery worker`` process holding unacknowledged tasks when the broker dies, as in
``esrr bench chaos``'s "broker restarted" phase.
"""

from __future__ import annotations

import time
import uuid

import pytest
from celery.exceptions import TimeoutError
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from es_rerank.payload import encode
from tests.worker.test_broker import QUERIES, make_request, rows_for, send

RESTARTS = 3
# Sends after a restart, each waiting up to 2 s for its answer, before the test gives up: a count of tries,
# not a stopwatch (how soon a worker answers again is `esrr bench chaos`'s "broker restarted" row).
SENDS_AFTER_RESTART = 30  # 30 s at the least


@pytest.mark.broker
def test_a_worker_survives_its_redis_killed_and_restarted_and_answers_again(broker, artifacts, private_redis):
    queue = f"reconnect-{uuid.uuid4().hex[:6]}"
    on_private = {"broker_url": private_redis.url, "broker_key_prefix": ""}
    client = broker.client(queue, **on_private)
    worker = broker.worker(queue, score_delay_ms=1000, **on_private).start()
    try:
        worker.wait_ready(client)
        for restart in range(RESTARTS):
            for i in range(4):  # their results go with the old Redis; what matters here is the worker
                send(client, queue, encode(make_request(artifacts, QUERIES[i], rows_for(artifacts, i, 8))))
            time.sleep(0.3)  # taken off the queue, held unacknowledged, sleeping in the task
            private_redis.kill_and_restart(down_s=0.5)
            request = make_request(artifacts, QUERIES[restart], rows_for(artifacts, 40 + restart, 6))
            for _ in range(SENDS_AFTER_RESTART):
                assert worker.process.poll() is None, (
                    f"the worker exited after restart {restart + 1}:\n{worker.log_tail()}"
                )
                try:
                    result = send(client, queue, encode(request)).get(timeout=2)
                    break
                except (TimeoutError, OperationalError, RedisError):  # not answered yet: send again
                    time.sleep(1)  # a refused connection fails at once: do not spin through the tries
            else:
                pytest.fail(
                    f"no answer to {SENDS_AFTER_RESTART} sends after restart {restart + 1}:\n{worker.log_tail()}"
                )
            assert len(result["scores"]) == 6
        time.sleep(3)  # a late exit (the next redelivery sweep) would show here
        assert worker.process.poll() is None, worker.log_tail()
    finally:
        worker.stop()
        client.close()
