"""Lease expiry: unstarted lapses (R-4), started lapses (R-5 abandoned), renewed leases
left alone (R-10), and releases (R-12)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState, Outcome
from coordinator.scheduler.due import promote_due
from coordinator.scheduler.leases import expire_leases
from coordinator.service.work import AttemptMessage, BatchAnswers, WorkBatch
from coordinator.store import Store

from .harness import LEASE_MS, SECOND, WIRE, Harness, r2_range


def _until_due(harness: Harness, job_id: str) -> None:
    harness.clock.advance(max(harness.job(job_id).run_at_ms - harness.clock.now_ms(), 0))


def test_r4_an_unstarted_claim_that_lapses_costs_no_execution(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)

    answers = harness.lapse(LEASE_MS)
    now = harness.clock.now_ms()

    assert answers.terminal_job_ids == set()
    job = harness.job(job_id)
    assert (job.state, job.executions, job.unstarted_streak) == (JobState.SCHEDULED, 0, 1)
    assert job.run_at_ms == now + 1 * SECOND  # 1 s, doubling to 30 s
    assert (job.current_attempt_id, job.worker_id, job.lease_expires_at_ms) == (None, None, None)
    assert job.last_error_code == "unstarted_lease_expired"
    [attempt] = harness.attempts(job_id)
    assert (attempt.id, attempt.outcome, attempt.reported) == (
        claimed.attempt_id,
        Outcome.UNSTARTED_ABANDONED,
        False,
    )
    assert (attempt.started_at_ms, attempt.finished_at_ms, attempt.retry_delay_ms) == (None, now, 1 * SECOND)
    assert answers.next_run_at_ms == now + 1 * SECOND


def test_r4_a_lease_lapses_at_its_deadline_not_before(harness: Harness) -> None:
    job_id = harness.enqueue()
    harness.claim_one(job_id, lease_ms=10 * SECOND)

    harness.lapse(10 * SECOND - 1)
    assert harness.job(job_id).state is JobState.RESERVED

    harness.lapse(1)
    assert harness.job(job_id).state is JobState.SCHEDULED


def test_r4_the_fifth_unstarted_lapse_fails_the_job(harness: Harness) -> None:
    job_id = harness.enqueue()
    assert harness.job(job_id).max_unstarted_abandonments == 5
    delays = []
    for streak in (1, 2, 3, 4):
        harness.claim_one(job_id)
        harness.lapse(LEASE_MS)
        job = harness.job(job_id)
        assert (job.state, job.unstarted_streak, job.executions) == (JobState.SCHEDULED, streak, 0)
        delays.append(job.run_at_ms - harness.clock.now_ms())
        _until_due(harness, job_id)
    harness.claim_one(job_id)

    answers = harness.lapse(LEASE_MS)

    assert delays == [1 * SECOND, 2 * SECOND, 4 * SECOND, 8 * SECOND]
    assert answers.terminal_job_ids == {job_id}
    job = harness.job(job_id)
    assert (job.state, job.last_error_code) == (JobState.FAILED, "reservation_abandonment_exhausted")
    assert (job.executions, job.unstarted_streak, job.finished_at_ms) == (0, 5, harness.clock.now_ms())
    attempts = harness.attempts(job_id)
    assert [a.outcome for a in attempts] == [Outcome.UNSTARTED_ABANDONED] * 5
    assert attempts[-1].error_code == "reservation_abandonment_exhausted"
    assert attempts[-1].job_state_after is JobState.FAILED
    _until_due(harness, job_id)
    assert harness.claim(5) == []


def test_r4_the_guard_uses_the_jobs_own_setting(harness: Harness) -> None:
    job_id = harness.enqueue(settings=SettingsLayer(max_unstarted_abandonments=1))
    harness.claim_one(job_id)

    harness.lapse(LEASE_MS)

    job = harness.job(job_id)
    assert (job.state, job.last_error_code) == (JobState.FAILED, "reservation_abandonment_exhausted")


def test_r4_a_claim_that_starts_resets_the_streak(harness: Harness) -> None:
    job_id = harness.enqueue()
    for _ in range(4):
        harness.claim_one(job_id)
        harness.lapse(LEASE_MS)
        _until_due(harness, job_id)
    assert harness.job(job_id).unstarted_streak == 4

    claimed = harness.run(job_id)
    assert harness.job(job_id).unstarted_streak == 0
    harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE)
    _until_due(harness, job_id)
    harness.claim_one(job_id)
    harness.lapse(LEASE_MS)

    job = harness.job(job_id)
    assert (job.state, job.unstarted_streak, job.executions) == (JobState.SCHEDULED, 1, 1)


def test_r5_a_started_run_whose_lease_lapses_is_retried_with_lease_expired(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)

    answers = harness.lapse(LEASE_MS)
    now = harness.clock.now_ms()

    assert answers.terminal_job_ids == set()
    job = harness.job(job_id)
    assert (job.state, job.executions, job.last_error_code) == (JobState.SCHEDULED, 1, "lease_expired")
    [attempt] = harness.attempts(job_id)
    assert (attempt.id, attempt.outcome, attempt.error_code, attempt.reported) == (
        claimed.attempt_id,
        Outcome.ABANDONED,
        "lease_expired",
        False,
    )
    low, high = r2_range(1, 5 * SECOND, 60 * SECOND)
    assert attempt.retry_delay_ms is not None and low <= attempt.retry_delay_ms <= high
    assert job.run_at_ms == now + attempt.retry_delay_ms
    _until_due(harness, job_id)
    assert harness.start(harness.claim_one(job_id).attempt_id).execution_number == 2


def test_r5_a_lapse_after_the_last_execution_fails_the_job(harness: Harness) -> None:
    job_id = harness.enqueue(settings=SettingsLayer(max_executions=1))
    harness.run(job_id)

    answers = harness.lapse(LEASE_MS)

    assert answers.terminal_job_ids == {job_id}
    job = harness.job(job_id)
    assert (job.state, job.executions, job.last_error_code) == (JobState.FAILED, 1, "lease_expired")
    assert harness.attempts(job_id)[0].job_state_after is JobState.FAILED


def test_r10_expiry_never_touches_a_renewed_lease(harness: Harness) -> None:
    reserved_id, running_id = harness.enqueue(queue="a"), harness.enqueue(queue="b")
    reserved, running = harness.claim_one(reserved_id), harness.run(running_id)
    harness.clock.advance(LEASE_MS - 1)
    harness.heartbeat([reserved.attempt_id, running.attempt_id])
    before = [harness.snapshot(reserved_id), harness.snapshot(running_id)]

    harness.lapse(LEASE_MS - 1)

    assert [harness.snapshot(reserved_id), harness.snapshot(running_id)] == before
    harness.lapse(1)
    assert harness.job(reserved_id).state is JobState.SCHEDULED
    assert harness.job(running_id).state is JobState.SCHEDULED


def test_expiry_leaves_jobs_without_a_lease_alone(harness: Harness) -> None:
    available = harness.enqueue(queue="a")
    scheduled = harness.enqueue(queue="b", run_at_ms=harness.clock.now_ms() + 3_600 * SECOND)
    finished = harness.enqueue(queue="c")
    harness.report(harness.run(finished).attempt_id)
    before = [harness.snapshot(j) for j in (available, scheduled, finished)]

    answers = harness.lapse(24 * 3_600 * SECOND)

    assert [harness.snapshot(j) for j in (available, scheduled, finished)] == before
    assert answers.terminal_job_ids == set() and answers.available_changed is False


def test_expiry_after_a_result_changes_nothing(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.clock.advance(LEASE_MS)  # the lease is due, but the result lands first
    harness.report(claimed.attempt_id, output=b"done")
    before = harness.snapshot(job_id)

    expire_leases(harness.ops)

    assert harness.snapshot(job_id) == before
    assert harness.job(job_id).state is JobState.SUCCEEDED


# -- releases (R-12) --------------------------------------------------------------------------


def test_r12_a_release_makes_the_job_available_at_once_without_charge(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    harness.clock.advance(5 * SECOND)
    now = harness.clock.now_ms()

    answers = harness.release(claimed.attempt_id)

    assert answers.available_changed is True
    job = harness.job(job_id)
    assert (job.state, job.run_at_ms, job.executions, job.unstarted_streak) == (JobState.AVAILABLE, now, 0, 0)
    assert (job.current_attempt_id, job.worker_id, job.lease_expires_at_ms) == (None, None, None)
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.finished_at_ms, attempt.reported) == (Outcome.RELEASED, now, True)
    assert harness.transitions(job_id)[-1]["reason"] == "released"
    again = harness.claim_one(job_id, worker_id="worker-2")
    assert again.attempt_id != claimed.attempt_id


def test_r12_a_release_keeps_the_unstarted_streak(harness: Harness) -> None:
    """R-4 counts lapses only; a release is neither a lapse nor a start."""
    job_id = harness.enqueue()
    harness.claim_one(job_id)
    harness.lapse(LEASE_MS)
    _until_due(harness, job_id)

    harness.release(harness.claim_one(job_id).attempt_id)

    assert harness.job(job_id).unstarted_streak == 1


def test_r12_releasing_a_started_superseded_or_unknown_attempt_changes_nothing(harness: Harness) -> None:
    running = harness.run(harness.enqueue(queue="a"))
    before = harness.snapshot(running.job.id)

    harness.ops.process(
        WorkBatch(
            releases=[
                AttemptMessage(attempt_id, harness.holder(running.attempt_id))
                for attempt_id in (running.attempt_id, "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")
            ]
        )
    )

    assert harness.snapshot(running.job.id) == before
    reserved = harness.claim_one(harness.enqueue(queue="b"))
    harness.release(reserved.attempt_id)
    released = harness.snapshot(reserved.job.id)
    harness.release(reserved.attempt_id)  # a repeat
    assert harness.snapshot(reserved.job.id) == released


@pytest.mark.postgres
def test_postgres_concurrent_expiry_recovers_each_job_once(postgres_url: str) -> None:
    """docs/scaling.md: lease expiry is safe with any number of replicas."""
    queue = f"q-{uuid.uuid4().hex[:12]}"
    clock = FakeClock()
    stores = [Store.open(postgres_url) for _ in range(3)]
    try:
        harnesses = [Harness.build(s, clock, CoordinatorConfig(maintenance_batch=7)) for s in stores]
        first = harnesses[0]
        ids = {e.job_id for e in first.enqueue_specs([NewJobSpec(WIRE, b"", queue=queue) for _ in range(30)])}
        claimed = first.claim(30, queues=(queue,))
        assert len(claimed) == 30
        for c in claimed[::2]:
            first.start(c.attempt_id)
        clock.advance(LEASE_MS)
        barrier = threading.Barrier(len(harnesses))

        def expire(h: Harness) -> list[BatchAnswers]:
            barrier.wait()
            rounds = []
            while (answers := expire_leases(h.ops)).available_changed or answers.next_run_at_ms:
                rounds.append(answers)
            return rounds

        with ThreadPoolExecutor(len(harnesses)) as pool:
            for future in [pool.submit(expire, h) for h in harnesses]:
                future.result(timeout=60)

        for job_id in ids:
            job = first.job(job_id)
            [attempt] = first.attempts(job_id)
            assert job.state is JobState.SCHEDULED
            assert (job.unstarted_streak, job.executions) in {(1, 0), (0, 1)}
            assert attempt.outcome in {Outcome.UNSTARTED_ABANDONED, Outcome.ABANDONED}
            # enqueued, claimed, [started,] recovered: recovered exactly once
            assert len(first.transitions(job_id)) == 3 + job.executions
    finally:
        for s in stores:
            s.close()


def test_an_expiry_pass_says_whether_any_lease_is_left_to_watch(harness: Harness) -> None:
    assert expire_leases(harness.ops).maintenance_left is False  # nothing leased: idle
    claimed = harness.claim_one(harness.enqueue())
    assert expire_leases(harness.ops).maintenance_left is True
    harness.release(claimed.attempt_id)
    assert expire_leases(harness.ops).maintenance_left is False


def test_a_due_pass_says_whether_any_job_is_left_scheduled(harness: Harness) -> None:
    assert promote_due(harness.ops).maintenance_left is False
    harness.enqueue(run_at_ms=harness.clock.now_ms() + 10_000)
    assert promote_due(harness.ops).maintenance_left is True
    harness.clock.advance(10_000)
    assert promote_due(harness.ops).maintenance_left is True  # it promoted one
    assert promote_due(harness.ops).maintenance_left is False
