"""Where fair turns start (docs/flow-control.md, "Fair turns"), on both engines: each
store keeps its own memory of the key it served last, so two coordinators in one
process do not move each other's turns, and a deleted queue's entry goes with it."""

from __future__ import annotations

from coordinator.config import CoordinatorConfig
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState, Outcome
from coordinator.store import Store

from .harness import WIRE, Harness


def _enqueue_keys(harness: Harness, *keys: str) -> None:
    harness.enqueue_specs([NewJobSpec(WIRE, b"{}", queue="q", concurrency_key=key) for key in keys])


def _claim_key(harness: Harness, finish: bool = False) -> str:
    (claimed,) = harness.claim(1, queues=("q",))
    if finish:
        assert harness.start(claimed.attempt_id).granted
        assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED).accepted
    return claimed.job.concurrency_key


def test_two_stores_in_one_process_keep_their_own_turns(database_url: str, harness: Harness) -> None:
    second = Store.open(database_url)
    try:
        other = Harness.build(second, harness.clock, CoordinatorConfig())
        _enqueue_keys(harness, "a", "a", "b", "b", "c", "c")

        assert [_claim_key(harness), _claim_key(harness)] == ["a", "b"]
        # A store sharing the first one's memory would go on with c; its own starts at a.
        assert _claim_key(other) == "a"
        assert _claim_key(harness) == "c"
        assert _claim_key(other) == "b"
    finally:
        second.close()


def test_a_deleted_queues_turn_goes_with_it(harness: Harness) -> None:
    _enqueue_keys(harness, "a", "b")
    assert [_claim_key(harness, finish=True), _claim_key(harness, finish=True)] == ["a", "b"]
    assert len(harness.store._last_served) == 1

    finished_by = harness.clock.now_ms() + 1
    assert harness.store.transact(lambda tx: tx.purge(JobState.SUCCEEDED, finished_by, 10)) == 2
    assert harness.store.transact(lambda tx: tx.forget_idle_queues(10)) == ["q"]  # retention's way

    assert len(harness.store._last_served) == 0
    _enqueue_keys(harness, "a", "b", "c")
    assert _claim_key(harness) == "a"  # afresh: a memory of b would have given c
