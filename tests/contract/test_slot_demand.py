"""The worker slots a queue wants (``Store.slot_demand``, docs/autoscaling.md) on both
engines: leased jobs always, claimable ones due within the horizon unless the queue is
paused, only the wire names asked for, each count capped, and every count a walk of a
partial index (never a scan of the queue's ended jobs)."""

from __future__ import annotations

import re

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.flow import WaitingReason
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.scheduler.stats import read_queue_stats
from coordinator.service.queues import QueueService
from coordinator.store import reads

from .harness import OPERATOR, OTHER_WIRE, QUEUE, WIRE, Harness, sent_statements
from .test_query_plans import assert_uses_index, job_selects, mostly_finished, postgres_plan, sqlite_plan  # noqa: F401 (fixture)

CAP = 1_000


def demand(harness: Harness, cap: int = CAP, **target: object) -> SlotDemand:
    """With per-key controls, up to ``CAP`` due jobs are walked whatever ``cap`` is (the
    service's bound: ``ScalerLimits.max_counted_jobs``)."""
    now_ms = harness.clock.now_ms()
    return harness.store.slot_demand(DemandTarget(QUEUE, **target), now_ms, cap, CAP)  # type: ignore[arg-type]


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


# -- what the queue's controls hold back (docs/autoscaling.md, docs/metrics.md) -----------


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig())


def _enqueue_keys(harness: Harness, keys: dict[str, int]) -> None:
    harness.enqueue_specs(
        [NewJobSpec(WIRE, b"{}", queue=QUEUE, concurrency_key=k) for k, n in keys.items() for _ in range(n)]
    )


def _held(harness: Harness, scan: int = CAP) -> dict[str, int]:
    """The held-back gauge's values for the queue, as the stats loop reads them."""
    held = read_queue_stats(harness.store, harness.clock, scan)[4]
    return {kind: count for (queue, kind), count in held.items() if queue == QUEUE}


def test_a_queue_at_its_limit_wants_its_leased_slots_and_holds_back_the_rest(harness: Harness) -> None:
    for _ in range(7):
        harness.enqueue()
    _queues(harness).set_limit(QUEUE, 3, OPERATOR)
    harness.run()
    harness.claim(2)
    assert demand(harness) == SlotDemand(leased=3, due=0, paused=False)  # 3 wanted, not 3 + 4
    assert _held(harness) == {"queue_limit": 4}
    _queues(harness).set_limit(QUEUE, 5, OPERATOR)
    assert demand(harness) == SlotDemand(leased=3, due=2, paused=False)
    assert _held(harness) == {"queue_limit": 2}
    _queues(harness).pause(QUEUE, OPERATOR)
    assert demand(harness).slots == 3
    assert _held(harness) == {"queue_paused": 4}  # the first control that holds, alone


def test_a_per_key_limit_holds_back_each_key_past_its_room(harness: Harness) -> None:
    _enqueue_keys(harness, {"a": 2, "c": 1})
    _queues(harness).set_key_limit(QUEUE, 2, OPERATOR)
    assert len(harness.claim(10)) == 3  # a at its limit, c with one slot left
    _enqueue_keys(harness, {"a": 3, "b": 1, "c": 2})
    # a: 3 due, no room; b: 1 due, room 2; c: 2 due, room 1. Runnable: b's and one of c's.
    assert demand(harness) == SlotDemand(leased=3, due=2, paused=False)
    assert _held(harness) == {"key_limit": 4}
    assert demand(harness, cap=1).due == 1  # the first due job walked may be a's: still 1
    now_ms = harness.clock.now_ms()
    asked = harness.store.slot_demand(DemandTarget(QUEUE), now_ms, 1, CAP, leased_enough=True)
    assert asked == SlotDemand(leased=1, due=0, paused=False)  # IsActive: a lease answers
    assert demand(harness, wire_names=(OTHER_WIRE,)).due == 0
    # The queue's limit comes first: at it, every job is the limit's.
    _queues(harness).set_limit(QUEUE, 3, OPERATOR)
    assert demand(harness).due == 0
    assert _held(harness) == {"queue_limit": 6, "key_limit": 0}
    _queues(harness).set_limit(QUEUE, 4, OPERATOR)
    assert demand(harness).due == 1
    assert _held(harness) == {"queue_limit": 5, "key_limit": 0}


def test_a_per_key_rate_holds_back_the_keys_whose_window_is_full(harness: Harness) -> None:
    _enqueue_keys(harness, {"a": 4, "b": 1})
    _queues(harness).set_rate(QUEUE, 2, 60_000, True, OPERATOR)
    for claimed in harness.claim(10):  # a's two and b's one, started: counted in the window
        assert harness.start(claimed.attempt_id).granted
        harness.report(claimed.attempt_id, Outcome.SUCCEEDED)
    _enqueue_keys(harness, {"b": 2, "c": 3})
    # a: 2 due, window full; b: 2 due, room 1; c: 3 due, room 2.
    assert demand(harness) == SlotDemand(leased=0, due=3, paused=False)
    assert _held(harness) == {"rate": 4}
    harness.clock.advance(70_000)  # a period and a slot later: the window is empty
    assert demand(harness).due == 6
    assert _held(harness) == {"rate": 1}  # c's third: its rate is 2 at once


def test_a_queue_wide_rate_and_a_per_key_limit_are_charged_in_the_claims_order(harness: Harness) -> None:
    _enqueue_keys(harness, {"a": 1})
    _queues(harness).set_key_limit(QUEUE, 1, OPERATOR)
    _queues(harness).set_rate(QUEUE, 3, 60_000, False, OPERATOR)
    harness.claim(1)  # a at its limit; one of the rate's three counted (reserved)
    _enqueue_keys(harness, {"a": 2, "b": 2, "c": 1, "d": 1})
    # Per-key limit: a's 2 held, b's second held; left 3 (b, c, d), of which the rate's 2.
    assert demand(harness) == SlotDemand(leased=1, due=2, paused=False)
    assert _held(harness) == {"key_limit": 3, "rate": 1}


def test_the_keys_read_is_one_statement_over_partial_indexes_and_stops_at_its_bound(harness: Harness) -> None:
    _enqueue_keys(harness, {f"k{n}": 2 for n in range(5)})
    _queues(harness).set_key_limit(QUEUE, 1, OPERATOR)
    assert len(harness.claim(10)) == 5  # every key at its limit
    (stats,) = [s for s in harness.store.queue_stats(harness.clock.now_ms()) if s.queue.name == QUEUE]
    with sent_statements() as sent:
        found = harness.store.held_back(stats.queue, 5, 5, harness.clock.now_ms(), 3)
    grouped = [(sql, params) for sql, params in sent if "GROUP BY" in sql]
    assert len(grouped) == 1, sent
    sql, params = grouped[0]
    if harness.store.postgres:
        plan = postgres_plan(harness.store.url, sql, params)
        assert not [n for n in plan if n.startswith("Seq Scan on jobs")], plan
    else:  # the grouping of the (bounded) walked jobs takes a temporary B-tree: allowed
        plan = sqlite_plan(harness.store.url, sql, params)
        assert not [line for line in plan if re.match(r"SCAN jobs\b(?! USING)", line)], plan
    assert [n for n in plan if "ix_jobs_due" in n or "ix_jobs_claim" in n], plan
    assert [n for n in plan if "leased" in n and "ix_jobs_" in n], plan
    assert found.runnable == 0 and found.held == {WaitingReason.KEY_LIMIT: 3}  # 3 of 5 walked
    assert _held(harness, scan=4) == {"key_limit": 4}


def test_a_first_walk_with_nothing_runnable_walks_on_to_the_bound(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "FIRST_WALK", 2)
    now = harness.clock.now_ms()
    _enqueue_keys(harness, {"a": 1})
    _queues(harness).set_key_limit(QUEUE, 1, OPERATOR)
    harness.claim(1)  # a at its limit
    for n in range(4):  # a's backlog comes first in the due index
        harness.enqueue(concurrency_key="a", run_at_ms=now - 10_000 + n)
    harness.enqueue(concurrency_key="b")
    with sent_statements() as sent:
        assert demand(harness, cap=1).due == 1  # b's, past the first walk of a's two
    # Both engines walk a's older jobs first (by run-at, or by key): two walks.
    assert len([sql for sql, _ in sent if "GROUP BY" in sql and "due_jobs" in sql]) == 2, sent
    assert demand(harness, cap=1, wire_names=(OTHER_WIRE,)).due == 0
