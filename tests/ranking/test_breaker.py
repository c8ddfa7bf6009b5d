"""The model stage's circuit breaker (``es_rerank.ranking.breaker``), on a clock the test moves."""

from __future__ import annotations

import threading

import pytest

from es_rerank.ranking.breaker import CLOSED, OPEN, PROBING, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_it_opens_after_failures_in_a_row_and_a_success_resets_the_count():
    clock = Clock()
    breaker = CircuitBreaker(3, 5.0, clock)
    for _ in range(2):
        assert breaker.admit() is None
        breaker.failed("no worker answered")
    breaker.succeeded()
    for _ in range(2):
        breaker.failed("no worker answered")
    assert breaker.state == CLOSED and breaker.admit() is None
    breaker.failed("no worker answered on queue 'rerank'")
    assert breaker.state == OPEN
    skipped = breaker.admit()
    assert "skipped for 5.0 s more" in skipped and "3 searches in a row" in skipped
    assert "no worker answered on queue 'rerank'" in skipped


def test_after_the_cool_down_one_call_probes_while_the_others_skip():
    clock = Clock()
    breaker = CircuitBreaker(1, 5.0, clock)
    breaker.failed("broker down")
    clock.now += 4.9
    assert breaker.admit() is not None
    clock.now += 0.2
    assert breaker.admit() is None and breaker.state == PROBING  # the probe
    assert "until the search probing them is answered" in breaker.admit()
    breaker.failed("broker still down")
    assert breaker.state == OPEN and "5.0 s more" in breaker.admit()  # a new cool-down from the probe's failure
    clock.now += 5.0
    assert breaker.admit() is None
    breaker.succeeded()
    assert breaker.state == CLOSED and breaker.admit() is None


def test_a_probe_that_ends_without_news_frees_the_slot_for_the_next_call():
    clock = Clock()
    breaker = CircuitBreaker(1, 1.0, clock)
    breaker.failed("no worker answered")
    clock.now += 1.0
    assert breaker.admit() is None
    breaker.abandoned()
    assert breaker.state == OPEN and breaker.admit() is None  # the cool-down is over: the next call probes


def test_only_one_of_many_threads_probes():
    clock = Clock()
    breaker = CircuitBreaker(1, 1.0, clock)
    breaker.failed("no worker answered")
    clock.now += 2.0
    admitted, barrier = [], threading.Barrier(16)

    def call() -> None:
        barrier.wait()
        if breaker.admit() is None:
            admitted.append(1)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 1


@pytest.mark.parametrize("failures, cooldown_s", [(0, 1.0), (1, 0.0)])
def test_settings_out_of_range_are_refused(failures, cooldown_s):
    with pytest.raises(ValueError, match="failures must be at least 1"):
        CircuitBreaker(failures, cooldown_s)


def test_skipping_says_what_admit_would_without_admitting_a_probe():
    clock = Clock()
    breaker = CircuitBreaker(1, 5.0, clock)
    assert breaker.skipping() is None
    breaker.failed("broker down")
    assert breaker.skipping() == breaker.admit() and "5.0 s more" in breaker.skipping()
    clock.now += 5.0
    assert breaker.skipping() is None and breaker.state == OPEN  # the next call may probe; none was admitted
    assert breaker.admit() is None and breaker.state == PROBING
    assert "until the search probing them is answered" in breaker.skipping()
