"""``QueueService.get`` on both engines (issue 41, ``GetQueue``): one queue as a page lists
it, with what each of its controls holds back of its available jobs now (the held-back
gauge's count, ``domain.backlog``); a bad name is refused before any read, an unknown
queue is NOT_FOUND."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.flow import WaitingReason
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState
from coordinator.errors import InvalidArgument, NotFound
from coordinator.service.queues import QueueService

from .harness import OPERATOR, WIRE, Harness


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig())


def _enqueue(harness: Harness, count: int, queue: str = "q") -> None:
    harness.enqueue_specs([NewJobSpec(WIRE, b"{}", queue=queue) for _ in range(count)])


def test_a_limited_queue_charges_the_jobs_past_its_room_to_the_limit_then_the_rate(harness: Harness) -> None:
    _enqueue(harness, 6)
    queues = _queues(harness)
    queues.set_limit("q", 3, OPERATOR)
    assert len(harness.claim(2, queues=("q",))) == 2

    limited = queues.get("q")

    assert (limited.stats.queue.name, limited.stats.queue.concurrency_limit) == ("q", 3)
    assert (limited.stats.counts[JobState.AVAILABLE], limited.stats.counts[JobState.RESERVED]) == (4, 2)
    assert limited.held.held == {WaitingReason.QUEUE_LIMIT: 3}  # one slot of 3 is left
    assert limited.held.runnable == 1
    [listed], _ = queues.page(page_size=0, page_token="")
    assert limited.stats == listed  # what the listing gives, GetQueue gives

    queues.set_rate("q", 1, 3_600_000, False, OPERATOR)  # the 2 reserved already fill it
    rated = queues.get("q")
    assert rated.held.held == {WaitingReason.QUEUE_LIMIT: 3, WaitingReason.RATE: 1}
    assert rated.held.runnable == 0


def test_a_queue_wide_rate_holds_back_the_jobs_past_its_room(harness: Harness) -> None:
    _enqueue(harness, 5)
    queues = _queues(harness)
    queues.set_rate("q", 2, 3_600_000, False, OPERATOR)

    shown = queues.get("q")

    assert shown.held.held == {WaitingReason.RATE: 3} and shown.held.runnable == 2


def test_a_queue_without_controls_or_available_jobs_is_not_weighed(harness: Harness) -> None:
    _enqueue(harness, 2)
    _enqueue(harness, 1, queue="idle")
    queues = _queues(harness)
    queues.set_key_limit("idle", 1, OPERATOR)
    harness.claim(1, queues=("idle",))

    free = queues.get("q")
    idle = queues.get("idle")

    assert free.held.held == {} and free.held.runnable == 2
    assert idle.held.held == {WaitingReason.KEY_LIMIT: 0} and idle.held.runnable == 0
    assert (idle.stats.active_keys, idle.stats.keys_at_limit, idle.stats.first_keys_at_limit) == (1, 1, ("",))


@pytest.mark.parametrize("name", ["", "a b", "..", "q/1", "q" * 129])
def test_a_bad_name_is_refused_before_any_read(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    reads: list[str] = []

    def counted(what: str) -> Any:
        def read(*args: object, **kwargs: object) -> None:
            reads.append(what)
            raise AssertionError(f"{what} read for a bad name")

        return read

    monkeypatch.setattr(harness.store, "queue_stats", counted("queue_stats"))
    monkeypatch.setattr(harness.store, "held_back", counted("held_back"))

    with pytest.raises(InvalidArgument) as refused:
        _queues(harness).get(name)

    assert "queue" in str(refused.value) and reads == []


def test_an_unknown_queue_is_not_found(harness: Harness) -> None:
    _enqueue(harness, 1, queue="known")

    with pytest.raises(NotFound) as missing:
        _queues(harness).get("nowhere")

    assert missing.value.reason == "QUEUE_NOT_FOUND" and "'nowhere'" in str(missing.value)
