"""The worker slots a queue wants (``Store.slot_demand``, docs/autoscaling.md) on both
engines: leased jobs always, claimable ones due within the horizon unless the queue is
paused, only the wire names asked for, each count capped, and every count a walk of a
partial index (never a scan of the queue's ended jobs)."""

from __future__ import annotations

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.states import Outcome
from coordinator.service.queues import QueueService

from .harness import OPERATOR, OTHER_WIRE, QUEUE, WIRE, Harness, sent_statements
from .test_query_plans import assert_uses_index, job_selects, mostly_finished  # noqa: F401 (fixture)

CAP = 1_000


def demand(harness: Harness, cap: int = CAP, **target: object) -> SlotDemand:
    return harness.store.slot_demand(DemandTarget(QUEUE, **target), harness.clock.now_ms(), cap)  # type: ignore[arg-type]


def test_leased_and_due_jobs_count_and_ended_waiting_and_later_ones_do_not(harness: Harness) -> None:
    now = harness.clock.now_ms()
    ended = harness.run(harness.enqueue())
    harness.report(ended.attempt_id, Outcome.SUCCEEDED)
    harness.run(harness.enqueue())  # running
    harness.claim_one(harness.enqueue())  # reserved
    for _ in range(3):
        harness.enqueue()  # available
    parent = harness.enqueue(queue="elsewhere")
    harness.enqueue(parent_ids=(parent,))  # waiting for its parent
    harness.enqueue(run_at_ms=now + 30_000)
    harness.enqueue(run_at_ms=now + 600_000)
    harness.enqueue(queue="elsewhere")

    assert demand(harness) == SlotDemand(leased=2, due=3, paused=False)
    assert demand(harness, horizon_ms=60_000).slots == 6
    assert demand(harness, horizon_ms=600_000).slots == 7
    harness.clock.advance(30_000)  # the first scheduled job is due now, promoted or not
    assert demand(harness).slots == 6


def test_a_paused_queue_counts_only_its_leased_jobs(harness: Harness) -> None:
    harness.run(harness.enqueue())
    harness.enqueue()
    harness.enqueue(run_at_ms=harness.clock.now_ms() + 1_000)
    QueueService(harness.store, harness.clock, CoordinatorConfig()).pause(QUEUE, OPERATOR)
    assert demand(harness, horizon_ms=60_000) == SlotDemand(leased=1, due=0, paused=True)


def test_wire_names_filter_and_counts_stop_at_the_cap(harness: Harness) -> None:
    harness.run(harness.enqueue(WIRE))
    for _ in range(4):
        harness.enqueue(WIRE)
    for _ in range(2):
        harness.enqueue(OTHER_WIRE)
    assert demand(harness, wire_names=(OTHER_WIRE,)).slots == 2
    assert demand(harness, wire_names=(WIRE, OTHER_WIRE)).slots == 7
    assert demand(harness, wire_names=("nobody.here",)).slots == 0
    assert demand(harness, cap=3) == SlotDemand(leased=1, due=3, paused=False)
    assert demand(harness, cap=1).slots == 2  # "is anything there": two index probes


def test_an_unknown_queue_wants_nothing(harness: Harness) -> None:
    target = DemandTarget("never-used")
    assert harness.store.slot_demand(target, harness.clock.now_ms(), CAP) == SlotDemand(0, 0, False)


@pytest.mark.parametrize("wire_names", [(), (WIRE,)], ids=["every job", "some wire names"])
def test_each_count_walks_a_partial_index(mostly_finished: Harness, wire_names: tuple[str, ...]) -> None:  # noqa: F811
    with sent_statements() as sent:
        counted = demand(mostly_finished, wire_names=wire_names, horizon_ms=120_000)
    assert counted == SlotDemand(leased=1, due=10, paused=False)  # 9 available, 1 scheduled
    counts = job_selects(sent)
    assert len(counts) == 2, sent  # the leased count and the due count
    for sql, params in counts:
        assert_uses_index(mostly_finished, sql, params)
