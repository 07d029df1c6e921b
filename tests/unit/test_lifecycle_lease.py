"""Lease expiry: R-4 before start (no execution charged), R-5 abandoned after start."""

from __future__ import annotations

import dataclasses
import random

import pytest
from domain_doubles import ATTEMPT_ID, NOW_MS, EndOfRange, NoRandom, job_view

from coordinator.domain.lifecycle import (
    Decision,
    Report,
    StartDecision,
    decide_lease_expiry,
    decide_release,
    decide_result,
    decide_start,
)
from coordinator.domain.records import JobRecord
from coordinator.domain.states import JobState, Outcome, can_transition

SECOND = 1_000
DETAIL_CAP = 16_384


def _lapse_until_failed(job: JobRecord, rng: NoRandom, limit: int = 1_000) -> list[Decision]:
    """Lets reserved claims of ``job`` lapse one after the other, feeding the streak back."""
    decisions: list[Decision] = []
    for _ in range(limit):
        decision = decide_lease_expiry(job, NOW_MS, rng)
        decisions.append(decision)
        assert can_transition(JobState.RESERVED, decision.job_state)
        if decision.job_state is JobState.FAILED:
            return decisions
        # The service writes the decision; the job is claimed again later.
        job = dataclasses.replace(job, state=JobState.RESERVED, unstarted_streak=decision.unstarted_streak)
    raise AssertionError(f"the guard never fired in {limit} unstarted claims")


# --- R-4 -------------------------------------------------------------------------------


def test_r4_five_unstarted_claims_fail_the_job(no_rng: NoRandom) -> None:
    """Default max_unstarted_abandonments 5: requeued after 1 s, 2 s, 4 s, 8 s, failed at the 5th."""
    job = job_view(JobState.RESERVED, executions=0)
    decisions = _lapse_until_failed(job, no_rng)
    assert len(decisions) == 5

    *requeues, last = decisions
    assert [d.retry_delay_ms for d in requeues] == [1 * SECOND, 2 * SECOND, 4 * SECOND, 8 * SECOND]
    for streak, decision in enumerate(requeues, start=1):
        assert decision.attempt_outcome is Outcome.UNSTARTED_ABANDONED
        assert decision.job_state is JobState.SCHEDULED
        assert decision.error_code == "unstarted_lease_expired"
        assert decision.retry_delay_ms is not None
        assert decision.run_at_ms == NOW_MS + decision.retry_delay_ms
        assert decision.unstarted_streak == streak

    assert last.attempt_outcome is Outcome.UNSTARTED_ABANDONED
    assert last.job_state is JobState.FAILED
    assert last.error_code == "reservation_abandonment_exhausted"
    assert last.unstarted_streak == 5
    assert last.run_at_ms is None
    assert last.retry_delay_ms is None


@pytest.mark.parametrize("max_unstarted", [1, 2, 5, 17, 100])
def test_r4_the_guard_fires_after_exactly_max_unstarted_abandonments(
    max_unstarted: int, no_rng: NoRandom
) -> None:
    job = job_view(JobState.RESERVED, executions=0, max_unstarted_abandonments=max_unstarted)
    decisions = _lapse_until_failed(job, no_rng)
    assert len(decisions) == max_unstarted
    assert decisions[-1].error_code == "reservation_abandonment_exhausted"
    assert all(d.job_state is JobState.SCHEDULED for d in decisions[:-1])


def test_r4_a_guard_of_1_fails_at_the_first_unstarted_claim(no_rng: NoRandom) -> None:
    job = job_view(JobState.RESERVED, executions=0, max_unstarted_abandonments=1)
    decision = decide_lease_expiry(job, NOW_MS, no_rng)
    assert decision.job_state is JobState.FAILED
    assert decision.error_code == "reservation_abandonment_exhausted"
    assert decision.unstarted_streak == 1


def test_r4_requeue_delay_doubles_and_is_capped_at_30_s(no_rng: NoRandom) -> None:
    job = job_view(JobState.RESERVED, executions=0, max_unstarted_abandonments=10)
    decisions = _lapse_until_failed(job, no_rng)
    assert len(decisions) == 10
    assert [d.retry_delay_ms for d in decisions[:-1]] == [
        s * SECOND for s in (1, 2, 4, 8, 16, 30, 30, 30, 30)
    ]


def test_r4_requeue_delay_follows_the_configured_pair(no_rng: NoRandom) -> None:
    job = job_view(
        JobState.RESERVED,
        executions=0,
        max_unstarted_abandonments=6,
        unstarted_initial_delay_ms=500,
        unstarted_max_delay_ms=3 * SECOND,
    )
    decisions = _lapse_until_failed(job, no_rng)
    assert [d.retry_delay_ms for d in decisions[:-1]] == [500, 1_000, 2_000, 3_000, 3_000]


@pytest.mark.parametrize("executions", [0, 1, 2])
def test_r4_r1_unstarted_claims_never_charge_an_execution(executions: int, no_rng: NoRandom) -> None:
    """After four lapsed claims the next claim still starts as execution ``executions + 1``."""
    job = job_view(JobState.RESERVED, executions=executions, max_executions=3)
    for _ in range(4):
        decision = decide_lease_expiry(job, NOW_MS, no_rng)
        assert decision.job_state is JobState.SCHEDULED
        job = dataclasses.replace(job, unstarted_streak=decision.unstarted_streak)
    assert job.executions == executions
    assert decide_start(job, ATTEMPT_ID) == StartDecision(True, execution_number=executions + 1)


def test_r4_the_guard_counts_consecutive_claims_only(low_rng: EndOfRange, no_rng: NoRandom) -> None:
    """A claim that starts resets the streak; the next five unstarted claims are needed again."""
    job = job_view(JobState.RESERVED, executions=0, max_executions=3)
    for _ in range(4):
        job = dataclasses.replace(
            job, unstarted_streak=decide_lease_expiry(job, NOW_MS, no_rng).unstarted_streak
        )
    assert job.unstarted_streak == 4

    start = decide_start(job, ATTEMPT_ID)
    assert start.granted
    running = dataclasses.replace(job, state=JobState.RUNNING, executions=start.execution_number)
    ended = decide_result(running, Report(Outcome.RETRYABLE_FAILURE), NOW_MS, DETAIL_CAP, low_rng)
    assert ended.job_state is JobState.SCHEDULED
    assert ended.unstarted_streak == 0

    job = dataclasses.replace(running, state=JobState.RESERVED, unstarted_streak=ended.unstarted_streak)
    assert len(_lapse_until_failed(job, no_rng)) == 5


def test_r4_r12_a_release_neither_counts_nor_resets_the_streak(no_rng: NoRandom) -> None:
    job = job_view(JobState.RESERVED, executions=0)
    for _ in range(4):
        job = dataclasses.replace(
            job, unstarted_streak=decide_lease_expiry(job, NOW_MS, no_rng).unstarted_streak
        )
    job = dataclasses.replace(job, unstarted_streak=decide_release(job, NOW_MS).unstarted_streak)
    assert job.unstarted_streak == 4
    assert decide_lease_expiry(job, NOW_MS, no_rng).error_code == "reservation_abandonment_exhausted"


def test_r4_unstarted_requeue_uses_no_randomness() -> None:
    """The NoRandom double raises if the decision draws; a real one would give the same delay."""
    job = job_view(JobState.RESERVED, executions=0, unstarted_streak=2)
    delays = {decide_lease_expiry(job, NOW_MS, random.Random(seed)).retry_delay_ms for seed in range(20)}
    assert delays == {4 * SECOND}


# --- R-5 abandoned ---------------------------------------------------------------------


@pytest.mark.parametrize("executions", [1, 2])
def test_r5_lease_lapse_after_start_is_retried_with_code_lease_expired(
    executions: int, low_rng: EndOfRange, high_rng: EndOfRange
) -> None:
    """Crash, stall or lost network after start: abandoned, retried with R-2's jittered delay."""
    job = job_view(JobState.RUNNING, executions=executions, max_executions=3)
    nominal = 5_000 * 2 ** (executions - 1)
    for rng, expected in ((low_rng, nominal // 2), (high_rng, nominal)):
        decision = decide_lease_expiry(job, NOW_MS, rng)
        assert decision.attempt_outcome is Outcome.ABANDONED
        assert decision.job_state is JobState.SCHEDULED
        assert decision.error_code == "lease_expired"
        assert decision.retry_delay_ms == expected
        assert decision.run_at_ms == NOW_MS + expected
        assert decision.unstarted_streak == 0
        assert can_transition(JobState.RUNNING, decision.job_state)


@pytest.mark.parametrize(("executions", "max_executions"), [(3, 3), (1, 1)])
def test_r5_lease_lapse_after_start_fails_when_the_budget_is_spent(
    executions: int, max_executions: int, low_rng: EndOfRange
) -> None:
    job = job_view(JobState.RUNNING, executions=executions, max_executions=max_executions)
    decision = decide_lease_expiry(job, NOW_MS, low_rng)
    assert decision.attempt_outcome is Outcome.ABANDONED
    assert decision.job_state is JobState.FAILED
    assert decision.error_code == "lease_expired"
    assert decision.run_at_ms is None
    assert decision.retry_delay_ms is None


def test_r5_r4_a_lapse_after_start_does_not_count_on_the_unstarted_guard(low_rng: EndOfRange) -> None:
    """Even with a streak of 4 and a guard of 5, a lapsed *started* run is only abandoned."""
    job = job_view(JobState.RUNNING, executions=1, unstarted_streak=4)
    decision = decide_lease_expiry(job, NOW_MS, low_rng)
    assert decision.job_state is JobState.SCHEDULED
    assert decision.error_code == "lease_expired"
    assert decision.unstarted_streak == 0
