"""The held-back arithmetic (``domain.backlog``): each control is charged with what it,
after the ones before it in the claim's order, keeps from running now; the kinds add up
to the due jobs less the runnable ones."""

from __future__ import annotations

import pytest

from coordinator.domain.backlog import HeldBack, KeyedBacklog, hold_back
from coordinator.domain.flow import WaitingReason
from coordinator.domain.records import QueueRecord

PAUSED, QUEUE, KEY, RATE = (
    WaitingReason.QUEUE_PAUSED,
    WaitingReason.QUEUE_LIMIT,
    WaitingReason.KEY_LIMIT,
    WaitingReason.RATE,
)


def queue(**controls: object) -> QueueRecord:
    return QueueRecord("q", **controls)  # type: ignore[arg-type]


def test_a_queue_without_controls_runs_every_due_job_and_has_no_kinds() -> None:
    assert hold_back(queue(), KeyedBacklog.unkeyed(7), 3, None) == HeldBack(7, {})


def test_a_paused_queue_holds_back_everything_under_the_pause_alone() -> None:
    found = hold_back(queue(paused=True, concurrency_limit=1), KeyedBacklog(7, 2, 1), 1, 0)
    assert found == HeldBack(0, {PAUSED: 7})


def test_a_queue_limit_leaves_its_room_runnable_and_at_the_limit_nothing() -> None:
    assert hold_back(queue(concurrency_limit=5), KeyedBacklog.unkeyed(7), 3, None) == HeldBack(2, {QUEUE: 5})
    assert hold_back(queue(concurrency_limit=5), KeyedBacklog.unkeyed(7), 5, None) == HeldBack(0, {QUEUE: 7})
    over = hold_back(queue(concurrency_limit=5), KeyedBacklog.unkeyed(7), 6, None)  # lowered below its jobs
    assert over == HeldBack(0, {QUEUE: 7})
    assert hold_back(queue(concurrency_limit=5), KeyedBacklog.unkeyed(2), 0, None) == HeldBack(2, {QUEUE: 0})


def test_the_per_key_limit_is_charged_only_with_what_the_queue_limit_left() -> None:
    backlog = KeyedBacklog(due=10, within_key_limit=4, within_key_rate=4)
    assert hold_back(queue(key_limit=2), backlog, 0, None) == HeldBack(4, {KEY: 6})
    both = hold_back(queue(concurrency_limit=8, key_limit=2), backlog, 5, None)
    assert both == HeldBack(3, {QUEUE: 7, KEY: 0})  # room 3 of the 4 the keys allow
    wide = hold_back(queue(concurrency_limit=20, key_limit=2), backlog, 5, None)
    assert wide == HeldBack(4, {QUEUE: 0, KEY: 6})


@pytest.mark.parametrize(
    ("per_key", "rate_room", "expected"),
    [(True, None, HeldBack(1, {KEY: 6, RATE: 3})), (False, 2, HeldBack(2, {KEY: 6, RATE: 2}))],
    ids=["per key", "queue-wide"],
)
def test_a_rate_is_charged_last_with_what_the_limits_left(
    per_key: bool, rate_room: int | None, expected: HeldBack
) -> None:
    controls = queue(key_limit=2, rate_count=5, rate_period_ms=1000, rate_per_key=per_key)
    backlog = KeyedBacklog(due=10, within_key_limit=4, within_key_rate=1 if per_key else 4)
    found = hold_back(controls, backlog, 0, rate_room)
    assert found == expected
    assert found.runnable + sum(found.held.values()) == backlog.due
