"""One terminal path: every way a job ends is reported once, as a ``JobFinished`` fact
with the job's final state, by the transaction that ended it (waiters, metrics and
later dependents hang off these facts); a change the transition table does not allow
is refused before anything is written."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.domain import changes
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import WorkerIdentity
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState, Outcome
from coordinator.service.effects import Effects, JobFinished
from coordinator.service.manage import ManagementService
from coordinator.service.work import ResultReport, WorkBatch
from coordinator.service.writes import JobWrites

from .harness import LEASE_MS, OPERATOR, QUEUE, WIRE, WORKER, Harness


def _finished(effects: Effects) -> list[JobFinished]:
    return list(effects.finished)


def test_a_success_finishes_the_job_once(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    answers = harness.ops.process(
        harness_result(claimed.attempt_id, Outcome.SUCCEEDED),
    )
    assert _finished(answers) == [JobFinished(job_id, QUEUE, WIRE, JobState.SUCCEEDED)]
    assert answers.terminal_job_ids == {job_id}


def test_a_permanent_failure_and_a_last_retry_finish_the_job_failed(harness: Harness) -> None:
    permanent = harness.enqueue()
    claimed = harness.run(permanent)
    answers = harness.ops.process(harness_result(claimed.attempt_id, Outcome.PERMANENT_FAILURE))
    assert _finished(answers) == [JobFinished(permanent, QUEUE, WIRE, JobState.FAILED)]

    last = harness.enqueue(settings=SettingsLayer(max_executions=1))
    claimed = harness.run(last)
    answers = harness.ops.process(harness_result(claimed.attempt_id, Outcome.RETRYABLE_FAILURE))
    assert _finished(answers) == [JobFinished(last, QUEUE, WIRE, JobState.FAILED)]


def test_a_retry_that_is_scheduled_finishes_nothing(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    answers = harness.ops.process(harness_result(claimed.attempt_id, Outcome.RETRYABLE_FAILURE))
    assert harness.job(job_id).state is JobState.SCHEDULED
    assert _finished(answers) == [] and answers.terminal_job_ids == set()


def test_a_lapsed_lease_on_the_last_execution_and_unstarted_exhaustion_finish_the_job(
    harness: Harness,
) -> None:
    started = harness.enqueue(settings=SettingsLayer(max_executions=1))
    harness.run(started)
    answers = harness.lapse(LEASE_MS)
    assert _finished(answers) == [JobFinished(started, QUEUE, WIRE, JobState.FAILED)]

    unstarted = harness.enqueue(settings=SettingsLayer(max_unstarted_abandonments=1))
    harness.claim_one(unstarted)
    answers = harness.lapse(LEASE_MS)
    assert harness.job(unstarted).last_error_code == "reservation_abandonment_exhausted"
    assert _finished(answers) == [JobFinished(unstarted, QUEUE, WIRE, JobState.FAILED)]


def test_a_cancel_finishes_a_queued_job_and_only_flags_a_running_one(harness: Harness) -> None:
    manage = ManagementService(harness.store, harness.clock)
    queued = harness.enqueue()
    assert _finished(manage.cancel(queued, OPERATOR).effects) == [
        JobFinished(queued, QUEUE, WIRE, JobState.CANCELLED)
    ]

    running = harness.enqueue()
    claimed = harness.run(running)
    assert _finished(manage.cancel(running, OPERATOR).effects) == []
    answers = harness.ops.process(harness_result(claimed.attempt_id, Outcome.CANCELLED))
    assert _finished(answers) == [JobFinished(running, QUEUE, WIRE, JobState.CANCELLED)]


def test_a_change_outside_the_transition_table_is_refused_and_writes_nothing(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=b"done")
    before = harness.rows()
    succeeded = harness.job(job_id)

    illegal = pytest.raises(changes.IllegalTransition, match="succeeded -> available")
    with illegal, harness.store.write() as tx:
        JobWrites(tx, harness.clock.now_ms()).change(succeeded, changes.due(succeeded), "due", None)

    assert harness.rows() == before


def test_a_change_stamps_its_new_record_and_refuses_the_record_it_read(harness: Harness) -> None:
    job = harness.job(harness.enqueue())
    now = harness.clock.now_ms() + 5
    with harness.store.write() as tx:
        writes = JobWrites(tx, now)
        after = changes.claimed(job, "attempt-x", WORKER, now + LEASE_MS)
        written = writes.change(job, after, "claimed", None)
        assert (written.history_seq, written.updated_at_ms) == (job.history_seq + 1, now)
        assert writes.fresh(job) is written
        assert job.history_seq == harness.job(job.id).history_seq  # the record read is untouched
        with pytest.raises(changes.IllegalTransition, match="new record"):
            writes.change(written, written, "again", None)
    assert harness.job(job.id) == job  # gathered, never flushed: nothing written


def test_the_terminal_path_takes_terminal_states_only(harness: Harness) -> None:
    job = harness.job(harness.enqueue())
    with pytest.raises(changes.IllegalTransition, match="non-terminal"), harness.store.write() as tx:
        JobWrites(tx, harness.clock.now_ms()).end_job(job, replace(job, state=JobState.RESERVED), reason="x")


def harness_result(attempt_id: str, outcome: Outcome) -> WorkBatch:
    return WorkBatch(results=[ResultReport(attempt_id, Report(outcome), sender=WorkerIdentity(WORKER))])
