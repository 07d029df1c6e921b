"""Rates over real concurrency keys (docs/flow-control.md), on both engines with a fake
clock: a per-key rate holds for each key on its own, counted by the jobs'
``concurrency_key``; a queue-wide rate counts every key's starts together; a job its
key's rate holds back says ``rate``, after the limits in the one order of reasons."""

from __future__ import annotations

from collections import defaultdict

from coordinator.config import CoordinatorConfig
from coordinator.domain.flow import WaitingReason
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.service.queues import QueueService

from .harness import OPERATOR, WIRE, Harness

COUNT, PERIOD_MS = 2, 1000
STEP_MS = 250


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig())


def _enqueue_keys(harness: Harness, keys: dict[str, int]) -> list[str]:
    specs = [NewJobSpec(WIRE, b"{}", queue="q", concurrency_key=k) for k, n in keys.items() for _ in range(n)]
    return [item.job_id for item in harness.enqueue_specs(specs)]


def _run_for(harness: Harness, steps: int) -> dict[str, list[int]]:
    """Claims, starts and ends every job it may each ``STEP_MS`` of fake time; the start
    times per key, as the coordinator recorded them (the attempts' ``started_at_ms``)."""
    started: dict[str, list[int]] = defaultdict(list)
    for _ in range(steps):
        for claimed in harness.claim(20, queues=("q",)):
            assert harness.start(claimed.attempt_id).granted
            attempt = harness.store.get_attempt(claimed.attempt_id)
            assert attempt is not None and attempt.started_at_ms is not None
            started[claimed.job.concurrency_key].append(attempt.started_at_ms)
            assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED).accepted
        harness.clock.advance(STEP_MS)
    return started


def _most_in_a_window(times: list[int]) -> int:
    """The most of ``times`` in any window of ``PERIOD_MS`` (half-open)."""
    ordered = sorted(times)
    return max(sum(1 for t in ordered if start <= t < start + PERIOD_MS) for start in ordered)


def test_a_per_key_rate_holds_for_each_key_of_real_keyed_jobs(harness: Harness) -> None:
    _enqueue_keys(harness, {"tenant:a": 8, "tenant:b": 8})
    _queues(harness).set_rate("q", COUNT, PERIOD_MS, True, OPERATOR)

    first = harness.claim(20, queues=("q",))
    assert sorted(c.job.concurrency_key for c in first) == ["tenant:a", "tenant:a", "tenant:b", "tenant:b"]
    held = next(j for j in harness.all_jobs() if j.state.value == "available")
    assert harness.jobs.waiting_reason(held) is WaitingReason.RATE
    listed = _queues(harness).page(page_size=0, page_token="")[0][0]
    assert (listed.active_keys, listed.keys_at_rate, listed.keys_at_limit) == (2, 2, None)
    assert listed.first_keys_at_rate == ("tenant:a", "tenant:b")
    for claimed in first:
        assert harness.start(claimed.attempt_id).granted
        assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED).accepted
    listed = _queues(harness).page(page_size=0, page_token="")[0][0]
    assert (listed.active_keys, listed.keys_at_rate) == (0, 2)  # started: still in the window

    started = _run_for(harness, steps=16)  # 4 s more: each key gets its 2 per second
    for key in ("tenant:a", "tenant:b"):
        assert _most_in_a_window(started[key]) <= COUNT, (key, started[key])
        assert len(started[key]) >= 4  # the rate lets each key go on, not the queue once
    assert sum(len(times) for times in started.values()) + len(first) == 16


def test_a_queue_wide_rate_counts_every_keys_starts_together(harness: Harness) -> None:
    _enqueue_keys(harness, {"tenant:a": 6, "tenant:b": 6, "": 2})
    _queues(harness).set_rate("q", COUNT, PERIOD_MS, False, OPERATOR)

    started = _run_for(harness, steps=12)

    every = [t for times in started.values() for t in times]
    assert _most_in_a_window(every) <= COUNT, started
    assert len(every) >= 4


def test_a_key_limit_comes_before_the_rate_in_the_reason(harness: Harness) -> None:
    ids = _enqueue_keys(harness, {"tenant:a": 3})
    queues = _queues(harness)
    queues.set_key_limit("q", 1, OPERATOR)
    queues.set_rate("q", 1, PERIOD_MS, True, OPERATOR)

    claimed = harness.claim(5, queues=("q",))

    assert len(claimed) == 1
    waiting = [harness.job(i) for i in ids if i != claimed[0].job.id]
    # Both the key's limit and its rate are spent: the limit is the one reason given.
    assert {harness.jobs.waiting_reason(j) for j in waiting} == {WaitingReason.KEY_LIMIT}
    assert harness.start(claimed[0].attempt_id).granted
    assert harness.report(claimed[0].attempt_id, Outcome.SUCCEEDED).accepted
    assert {harness.jobs.waiting_reason(j) for j in waiting} == {WaitingReason.RATE}
