"""Cancel (R-8) and manual retry (R-9) as pure decisions, and the cancel-requested flag
honoured by result and lease-expiry decisions."""

from __future__ import annotations

import dataclasses

import pytest
from domain_doubles import NOW_MS, NoRandom, job_view

from coordinator.domain.lifecycle import (
    CancelAction,
    Report,
    decide_cancel,
    decide_lease_expiry,
    decide_manual_retry,
    decide_result,
)
from coordinator.domain.states import TERMINAL_STATES, WORKER_OUTCOMES, JobState, Outcome, can_transition

NOT_RUNNING = [JobState.SCHEDULED, JobState.WAITING, JobState.AVAILABLE, JobState.RESERVED]


@pytest.mark.parametrize("state", NOT_RUNNING)
def test_r8_cancel_ends_a_job_that_is_not_running_at_once(state: JobState) -> None:
    decision = decide_cancel(job_view(state, executions=0))

    assert decision.action is CancelAction.END_NOW
    assert decision.ends_attempt is (state is JobState.RESERVED)
    assert can_transition(state, JobState.CANCELLED)


def test_r8_cancel_of_a_running_job_is_a_request_to_its_worker() -> None:
    assert decide_cancel(job_view(JobState.RUNNING)).action is CancelAction.REQUEST
    again = job_view(JobState.RUNNING, cancel_requested=True)
    assert decide_cancel(again).action is CancelAction.REQUEST  # repeats are harmless


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_r8_cancel_of_a_terminal_job_is_refused_with_a_reason(state: JobState) -> None:
    decision = decide_cancel(job_view(state, current_attempt_id=None))

    assert decision.action is CancelAction.REFUSE
    assert f"already {state.value}" in decision.reason


@pytest.mark.parametrize("outcome", sorted(WORKER_OUTCOMES - {Outcome.SUCCEEDED}))
def test_r8_a_cancel_requested_run_ending_short_of_success_cancels_the_job(
    outcome: Outcome, no_rng: NoRandom
) -> None:
    job = job_view(JobState.RUNNING, executions=1, cancel_requested=True, max_executions=5)
    code = "cancelled" if outcome is Outcome.CANCELLED else "boom"
    report = Report(outcome, error_code=code, message="m", detail="d", explicit_retry_delay_ms=10)

    decision = decide_result(job, report, NOW_MS, 16_384, no_rng)

    assert decision.job_state is JobState.CANCELLED
    assert decision.run_at_ms is None and decision.retry_delay_ms is None  # never retried
    assert (decision.attempt_outcome, decision.error_code) == (outcome, code)  # what really happened
    assert (decision.job_error_code or decision.error_code) == "cancelled"


def test_r8_a_cancel_requested_run_that_succeeds_first_stays_succeeded(no_rng: NoRandom) -> None:
    job = job_view(JobState.RUNNING, cancel_requested=True)
    decision = decide_result(job, Report(Outcome.SUCCEEDED), NOW_MS, 16_384, no_rng)
    assert decision.job_state is JobState.SUCCEEDED


def test_r8_worker_gone_the_lapsed_lease_cancels_instead_of_retrying(no_rng: NoRandom) -> None:
    running = job_view(JobState.RUNNING, executions=1, cancel_requested=True, max_executions=5)
    decision = decide_lease_expiry(running, NOW_MS, no_rng)

    assert (decision.attempt_outcome, decision.job_state) == (Outcome.ABANDONED, JobState.CANCELLED)
    assert decision.error_code == "lease_expired" and decision.job_error_code == "cancelled"
    assert decision.run_at_ms is None

    reserved = dataclasses.replace(running, state=JobState.RESERVED, executions=0)
    decision = decide_lease_expiry(reserved, NOW_MS, no_rng)
    assert (decision.attempt_outcome, decision.job_state) == (Outcome.UNSTARTED_ABANDONED, JobState.CANCELLED)


def test_r8_without_a_cancel_the_lapsed_lease_still_retries() -> None:
    job = job_view(JobState.RUNNING, executions=1, max_executions=5)
    decision = decide_lease_expiry(job, NOW_MS, _Low())
    assert decision.job_state is JobState.SCHEDULED


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED])
def test_r9_failed_and_cancelled_jobs_start_the_next_generation(state: JobState) -> None:
    job = dataclasses.replace(job_view(state, current_attempt_id=None, executions=3), generation=2)

    decision = decide_manual_retry(job)

    assert decision.allowed and decision.generation == 3
    assert can_transition(state, JobState.AVAILABLE)


@pytest.mark.parametrize("state", [s for s in JobState if s not in (JobState.FAILED, JobState.CANCELLED)])
def test_r9_other_states_cannot_be_retried(state: JobState) -> None:
    decision = decide_manual_retry(job_view(state))

    assert not decision.allowed
    assert state.value in decision.reason and "only failed or cancelled" in decision.reason


class _Low:
    def randint(self, a: int, b: int) -> int:
        return a
