"""The one order of a queue's controls (``domain.flow.CONTROL_ORDER``: paused, the queue's
limit, the per-key limit, the rate), kept alike by its three users, on both engines: for
every set of controls holding one job back at once, the claim refuses the job, the job's
``waiting_reason`` names the first of them in that order, and the held-back counts
(``domain.backlog``, as the store reads them) charge the job to that same control.

The first two derive their order from the tuple; the claim applies it in the steps of
its pipeline (``store.claims``), where it shows as the job refused (any control holding
refuses it, none lets it go) and, between a limit and the rate, as the rate's room a
refused job leaves to the next.
"""

from __future__ import annotations

import itertools

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.flow import CONTROL_ORDER, WaitingReason
from coordinator.service.queues import QueueService

from .harness import OPERATOR, Harness

HOUR_MS = 3_600_000
KEY = "k"


def _holding(harness: Harness, queue: str, controls: frozenset[WaitingReason], per_key_rate: bool) -> str:
    """A queue ``queue`` with one job of ``KEY`` running and one waiting, which each of
    ``controls`` holds back on its own; the waiting job's ID."""
    queues = QueueService(harness.store, harness.clock, CoordinatorConfig())
    running = harness.enqueue(queue=queue, concurrency_key=KEY)
    if WaitingReason.RATE in controls:  # before the running job's start, which it counts
        queues.set_rate(queue, 1, HOUR_MS, per_key_rate, OPERATOR)
    harness.run(running, queues=(queue,))
    waiting = harness.enqueue(queue=queue, concurrency_key=KEY)
    if WaitingReason.QUEUE_LIMIT in controls:
        queues.set_limit(queue, 1, OPERATOR)
    if WaitingReason.KEY_LIMIT in controls:
        queues.set_key_limit(queue, 1, OPERATOR)
    if WaitingReason.QUEUE_PAUSED in controls:
        queues.pause(queue, OPERATOR)
    return waiting


def _held(harness: Harness, queue: str) -> tuple[int, dict[WaitingReason, int]]:
    """The queue's held-back counts as the store reads them: runnable, and per control."""
    now = harness.clock.now_ms()
    (stats,) = [s for s in harness.store.queue_stats(now) if s.queue.name == queue]
    found = harness.store.held_back(stats.queue, 1, 1, now, 10)  # one due, one running
    return found.runnable, found.held


def test_the_order_is_every_waiting_reason_once() -> None:
    assert sorted(CONTROL_ORDER) == sorted(WaitingReason) and len(set(CONTROL_ORDER)) == len(CONTROL_ORDER)


@pytest.mark.parametrize("per_key_rate", [False, True], ids=["queue-rate", "key-rate"])
def test_the_claim_the_waiting_reason_and_the_held_back_counts_name_the_same_first_control(
    harness: Harness, per_key_rate: bool
) -> None:
    for size in range(len(CONTROL_ORDER) + 1):
        for chosen in itertools.combinations(CONTROL_ORDER, size):
            controls = frozenset(chosen)
            queue = "q-" + "-".join(control.value for control in chosen) if chosen else "q-free"
            waiting = _holding(harness, queue, controls, per_key_rate)
            first = next((control for control in CONTROL_ORDER if control in controls), None)
            claimed = [c.job.id for c in harness.claim(5, queues=(queue,))]
            reason = harness.jobs.waiting_reason(harness.job(waiting))
            runnable, held = _held(harness, queue)
            what = f"{sorted(controls)}: claimed {claimed}, reason {reason}, held {held}"
            if first is None:  # nothing holds: the claim takes the job, nothing is charged
                assert (claimed, reason, runnable, held) == ([waiting], None, 1, {}), what
                continue
            assert claimed == [], what
            assert reason is first, what
            assert runnable == 0 and held[first] == 1, what
            assert sum(held.values()) == 1, what  # charged to the first control only


def test_a_job_the_key_limit_refuses_never_takes_the_rates_room(harness: Harness) -> None:
    """The claim's side of the order, where it shows in what a claim takes: the per-key
    limit before the rate. Of a queue-wide rate of 2 with one start counted, a job of a
    key at its limit (first in claim order) leaves the last slot to the next key's job."""
    queues = QueueService(harness.store, harness.clock, CoordinatorConfig())
    running = harness.enqueue(queue="q", concurrency_key=KEY)
    queues.set_rate("q", 2, HOUR_MS, False, OPERATOR)
    queues.set_key_limit("q", 1, OPERATOR)
    harness.run(running, queues=("q",))
    held = harness.enqueue(queue="q", concurrency_key=KEY, priority=5)
    free = harness.enqueue(queue="q", concurrency_key="other")
    assert [c.job.id for c in harness.claim(5, queues=("q",))] == [free]
    assert harness.jobs.waiting_reason(harness.job(held)) is WaitingReason.KEY_LIMIT
    runnable, counted = _held(harness, "q")
    assert (runnable, counted[WaitingReason.KEY_LIMIT]) == (0, 1)
