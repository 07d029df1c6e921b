"""When a worker batch stamps its writes (issue 39): each time is read after the locks
and counts the write depends on, and a transaction run again reads its times afresh.

A fake clock that moves while the batch waits (for its attempts' rows, for the queue
row a limited queue's claim locks) or between two tries of the transaction shows the
stamps come from after the wait; on PostgreSQL a real lock wait, across two replicas,
shows the case the chaos checker found: a claim stamped before the end of the attempt
its key's count had already seen ended.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from coordinator.config import CoordinatorConfig
from coordinator.domain.lifecycle import Report
from coordinator.domain.states import JobState, Outcome
from coordinator.service.queues import QueueService
from coordinator.service.work import ClaimRequest, ResultReport, WorkBatch
from coordinator.store import Tx
from coordinator.store.errors import ConnectionLost
from tests.support.polling import wait_until

from .harness import LEASE_MS, OPERATOR, WAITING_ON_A_LOCK, WIRE, WORKER, Harness

WAIT_MS = 5_000
"""How long the fake clock moves while the batch waits."""


def _keyed_queue(harness: Harness, queue: str = "q") -> None:
    QueueService(harness.store, harness.clock, CoordinatorConfig()).set_key_limit(queue, 1, OPERATOR)


def _request(queue: str = "q") -> ClaimRequest:
    return ClaimRequest(WORKER, (queue,), (WIRE,), 1, LEASE_MS)


def _claimed_row_times(harness: Harness, job_id: str) -> tuple[int, int, int]:
    """The claim's attempt time, the job's lease end and its claimed transition's time."""
    (attempt,) = harness.attempts(job_id)
    job = harness.job(job_id)
    (claimed,) = [t for t in harness.transitions(job_id) if t["to_state"] is JobState.RESERVED]
    assert job.lease_expires_at_ms is not None
    return attempt.claimed_at_ms, job.lease_expires_at_ms, claimed["at_ms"]


def test_a_claim_is_stamped_after_the_queue_lock_it_waited_for(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.enqueue(queue="q", concurrency_key="k")
    _keyed_queue(harness)
    before = harness.clock.now_ms()
    original = Tx.lock_queues

    def waiting_lock(tx: Tx, names: Any) -> None:
        original(tx, names)
        harness.clock.advance(WAIT_MS)  # the lock was held this long by another replica

    monkeypatch.setattr(Tx, "lock_queues", waiting_lock)
    (claimed,) = harness.ops.process(WorkBatch(claims=[_request()])).claims[0]
    after = before + WAIT_MS
    assert harness.clock.now_ms() == after  # the lock was waited for exactly once
    assert _claimed_row_times(harness, claimed.job.id) == (after, after + LEASE_MS, after)
    assert claimed.lease_expires_at_ms == after + LEASE_MS


def test_a_result_is_stamped_after_its_attempts_rows_were_locked(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed = harness.run(harness.enqueue(queue="q"))
    before = harness.clock.now_ms()
    original = Tx.attempts_with_their_jobs

    def waiting_read(tx: Tx, ids: Any) -> Any:
        found = original(tx, ids)
        harness.clock.advance(WAIT_MS)
        return found

    monkeypatch.setattr(Tx, "attempts_with_their_jobs", waiting_read)
    assert harness.report(claimed.attempt_id).accepted
    (attempt,) = harness.attempts(claimed.job.id)
    ended = harness.transitions(claimed.job.id)[-1]
    assert attempt.finished_at_ms == ended["at_ms"] == before + WAIT_MS
    assert harness.job(claimed.job.id).finished_at_ms == before + WAIT_MS


def test_a_batch_run_again_after_a_lost_connection_takes_fresh_times(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first try loses its connection at its claim, after its result was decided;
    the second try stamps both the result and the claim from after the first."""
    running = harness.run(harness.enqueue(queue="q", concurrency_key="k"))
    waiting = harness.enqueue(queue="q", concurrency_key="k")
    _keyed_queue(harness)
    before = harness.clock.now_ms()
    original, tries = Tx.claim, []

    def lost_once(tx: Tx, wanted: Any, now_ms: int) -> Any:
        tries.append(now_ms)
        if len(tries) == 1:
            harness.clock.advance(WAIT_MS)
            raise ConnectionLost("the test dropped the connection")
        return original(tx, wanted, now_ms)

    monkeypatch.setattr(Tx, "claim", lost_once)
    result = ResultReport(
        running.attempt_id, Report(Outcome.SUCCEEDED), None, harness.holder(running.attempt_id)
    )
    answers = harness.ops.process(WorkBatch(results=[result], claims=[_request()]))
    after = before + WAIT_MS
    assert tries == [before, after]
    assert answers.results[0].accepted and [c.job.id for c in answers.claims[0]] == [waiting]
    assert harness.attempts(running.job.id)[0].finished_at_ms == after
    assert _claimed_row_times(harness, waiting) == (after, after + LEASE_MS, after)


def test_what_a_claim_takes_as_due_is_decided_by_a_time_before_its_stamp(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that fell due while the claim waited for its queue's lock is left for the
    next claim: due-ness is decided by the time read before the wait, the stamp after,
    so no claim is stamped before its job's run-at."""
    now = harness.clock.now_ms()
    due = harness.enqueue(queue="q", concurrency_key="a")
    due_in_the_wait = harness.enqueue(queue="q", concurrency_key="b", run_at_ms=now + WAIT_MS // 2)
    _keyed_queue(harness)
    original = Tx.lock_queues

    def waiting_lock(tx: Tx, names: Any) -> None:
        original(tx, names)
        harness.clock.advance(WAIT_MS)

    monkeypatch.setattr(Tx, "lock_queues", waiting_lock)
    assert [c.job.id for c in harness.claim(5, queues=("q",))] == [due]
    monkeypatch.undo()
    (claimed,) = harness.claim(5, queues=("q",))
    assert claimed.job.id == due_in_the_wait
    for job_id in (due, due_in_the_wait):
        assert harness.attempts(job_id)[0].claimed_at_ms >= harness.job(job_id).run_at_ms


# -- PostgreSQL: a real lock wait across two replicas ------------------------------------


@pytest.mark.postgres
def test_a_claim_that_waited_for_the_queue_lock_is_stamped_after_the_end_it_follows(
    replicas: tuple[Harness, Harness], postgres_url: str
) -> None:
    """Replica A's claim waits for the key-limited queue's row; meanwhile replica B ends
    the key's running attempt and commits. A's claim, once it has the lock, counts the
    key free and takes the next job: its stamp must not come before that end."""
    first, second = replicas
    running = first.run(first.enqueue(queue="q", concurrency_key="k"))
    waiting = first.enqueue(queue="q", concurrency_key="k")
    _keyed_queue(first)
    holder = create_engine(postgres_url)
    claimed: list[Any] = []
    try:
        with holder.connect() as lock, holder.connect() as watcher:
            lock.execute(text("SELECT name FROM queues WHERE name = 'q' FOR UPDATE"))
            thread = threading.Thread(
                target=lambda: claimed.extend(first.ops.process(WorkBatch(claims=[_request()])).claims[0])
            )
            thread.start()
            wait_until(
                lambda: watcher.execute(text(WAITING_ON_A_LOCK)).scalar(),
                interval=0.01,
                what="the claim to wait on the queue's row",
            )
            first.clock.advance(WAIT_MS)
            assert second.report(running.attempt_id).accepted  # commits while A waits
            lock.rollback()  # the lock goes: A counts the key free now
            thread.join(20)
    finally:
        holder.dispose()
    assert [c.job.id for c in claimed] == [waiting]
    ended = first.attempts(running.job.id)[0].finished_at_ms
    assert ended is not None
    assert first.attempts(waiting)[0].claimed_at_ms >= ended
