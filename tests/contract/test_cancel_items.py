"""Single-job cancels as items of a worker batch (``service.cancel_items``): a cancel
commits in one transaction with the enqueue calls and worker messages pending with it,
with the same effects as a cancel of its own (R-8, audited); a cancel refused, or one
that fails after writing, fails alone and leaves nothing of itself, and the others
commit."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import FailedPrecondition, NotFound, PermissionDenied
from coordinator.service.manage import Managed
from coordinator.service.work import CancelItem, ClaimRequest, EnqueueItem, ResultReport, WorkBatch
from coordinator.store import Tx

from .harness import LEASE_MS, OPERATOR, QUEUE, WIRE, WORKER, Harness

MISSING_JOB = "0190a0b0-0000-7000-8000-0000000000ff"


def _cancel(job_id: str) -> CancelItem:
    return CancelItem(job_id, OPERATOR)


def _success(harness: Harness, attempt_id: str) -> ResultReport:
    return ResultReport(attempt_id, Report(Outcome.SUCCEEDED), b"{}", harness.holder(attempt_id))


def _transactions(harness: Harness) -> list[float]:
    """Every write transaction of ``harness``'s store from now on."""
    seen: list[float] = []
    harness.store.on_transaction = seen.append
    return seen


def _audited(harness: Harness, job_id: str) -> list[str]:
    events = harness.store.list_audit_events(action="job.cancel", target=job_id, before_id=None, limit=10)
    return [event.detail for event in events]


def test_cancels_commit_in_one_transaction_with_an_enqueue_and_a_result(harness: Harness) -> None:
    finishing, queued, running = (harness.enqueue(queue=q) for q in ("a", "b", "c"))
    finished_attempt = harness.run(finishing).attempt_id
    running_attempt = harness.run(running).attempt_id
    transactions = _transactions(harness)
    batch = WorkBatch(
        results=[_success(harness, finished_attempt)],
        enqueues=[EnqueueItem([NewJobSpec(WIRE, b"{}", queue="d")])],
        cancels=[_cancel(queued), _cancel(running)],
    )

    answers = harness.ops.process(batch)

    assert len(transactions) == 1
    assert answers.results[0].accepted and harness.job(finishing).state is JobState.SUCCEEDED
    [enqueued] = answers.enqueued
    assert isinstance(enqueued, list) and harness.job(enqueued[0].job_id).state is JobState.AVAILABLE
    ended, requested = answers.cancelled
    assert isinstance(ended, Managed) and isinstance(requested, Managed)
    assert ended.job.state is JobState.CANCELLED and harness.job(queued).state is JobState.CANCELLED
    assert ended.effects.terminal_job_ids == {queued}
    assert (requested.job.state, requested.job.cancel_requested) == (JobState.RUNNING, True)
    # The worker holding the attempt is told (the caller hands the push on, R-8).
    assert [(p.worker_id, p.attempt_id) for p in requested.effects.cancel_pushes] == [
        (WORKER, running_attempt)
    ]
    assert _audited(harness, queued) == ["cancelled from available"]
    assert _audited(harness, running) == ["cancel requested while running"]


def test_a_refused_cancel_fails_alone_and_changes_nothing(harness: Harness) -> None:
    finishing, cancelled, good = (harness.enqueue(queue=q) for q in ("a", "b", "c"))
    attempt_id = harness.run(finishing).attempt_id
    harness.ops.process(WorkBatch(cancels=[_cancel(cancelled)]))
    before = harness.rows()
    batch = WorkBatch(
        results=[_success(harness, attempt_id)],
        enqueues=[EnqueueItem([NewJobSpec(WIRE, b"{}", queue="d")])],
        cancels=[_cancel(MISSING_JOB), _cancel(cancelled), _cancel(good)],
    )

    answers = harness.ops.process(batch)

    missing, ended, done = answers.cancelled
    assert isinstance(missing, NotFound) and isinstance(ended, FailedPrecondition)
    assert "already cancelled" in str(ended)
    assert isinstance(done, Managed) and harness.job(good).state is JobState.CANCELLED
    assert harness.job(finishing).state is JobState.SUCCEEDED
    [enqueued] = answers.enqueued
    assert isinstance(enqueued, list)
    assert _audited(harness, cancelled) == ["cancelled from available"]  # the first cancel only
    assert _audited(harness, MISSING_JOB) == []
    after = harness.rows()
    assert [row for row in after["transitions"] if row not in before["transitions"]]  # the others wrote
    assert len(after["jobs"]) == len(before["jobs"]) + 1


def test_a_cancel_that_fails_after_writing_rolls_back_to_its_savepoint(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the cancel's job write (here, its audit event refused) takes back
    that cancel's writes only: the job stays as it was, the other items commit."""
    doomed, other = harness.enqueue(queue="a"), harness.enqueue(queue="b")
    original = Tx.insert_audit_event

    def insert_audit_event(tx: Tx, event: Any) -> None:
        if event.target == doomed:
            raise PermissionDenied("refused by the test", reason="TEST")
        original(tx, event)

    monkeypatch.setattr(Tx, "insert_audit_event", insert_audit_event)
    before = harness.snapshot(doomed)

    answers = harness.ops.process(WorkBatch(cancels=[_cancel(doomed), _cancel(other)]))

    failed, done = answers.cancelled
    assert isinstance(failed, PermissionDenied) and isinstance(done, Managed)
    assert harness.snapshot(doomed) == before
    assert harness.job(other).state is JobState.CANCELLED
    _, counts = harness.store.job_totals()  # the queue counts, too
    assert (counts.get(JobState.AVAILABLE), counts.get(JobState.CANCELLED)) == (1, 1)


def test_a_job_cancelled_in_a_batch_is_not_claimed_by_it(harness: Harness) -> None:
    cancelled, kept = harness.enqueue(queue=QUEUE, priority=9), harness.enqueue(queue=QUEUE)
    claim = ClaimRequest(WORKER, (QUEUE,), (WIRE,), 10, LEASE_MS)

    answers = harness.ops.process(WorkBatch(claims=[claim], cancels=[_cancel(cancelled)]))

    assert [item.job.id for item in answers.claims[0]] == [kept]
    assert harness.job(cancelled).state is JobState.CANCELLED


def test_a_parent_cancelled_in_a_batch_fails_its_waiting_children(harness: Harness) -> None:
    parent = harness.enqueue(queue="p")
    child = harness.enqueue(queue="c", parent_ids=(parent,))

    [managed] = harness.ops.process(WorkBatch(cancels=[_cancel(parent)])).cancelled

    assert isinstance(managed, Managed) and managed.effects.terminal_job_ids == {parent, child}
    assert (harness.job(child).state, harness.job(child).last_error_code) == (
        JobState.FAILED,
        "parent_failed",
    )
