"""R-1 execution budget at start, new jobs' first state, and R-12 releases."""

from __future__ import annotations

import dataclasses

import pytest
from domain_doubles import ATTEMPT_ID, NOW_MS, OTHER_ATTEMPT_ID, EndOfRange, job_view

from coordinator.domain.lifecycle import (
    Report,
    StartDecision,
    decide_release,
    decide_result,
    decide_start,
    initial_state,
)
from coordinator.domain.records import JobRecord
from coordinator.domain.states import JobState, Outcome, can_transition

DETAIL_CAP = 16_384


# --- decide_start -----------------------------------------------------------------


@pytest.mark.parametrize("max_executions", [1, 3, 5, 100])
def test_r1_start_grants_the_next_execution_number(max_executions: int) -> None:
    for executions in range(max_executions):
        job = job_view(JobState.RESERVED, executions=executions, max_executions=max_executions)
        decision = decide_start(job, ATTEMPT_ID)
        assert decision.granted
        assert decision.execution_number == executions + 1


def test_r1_first_start_is_execution_1() -> None:
    assert decide_start(job_view(JobState.RESERVED, executions=0), ATTEMPT_ID) == StartDecision(
        True, execution_number=1
    )


@pytest.mark.parametrize("current", [OTHER_ATTEMPT_ID, None])
def test_r1_r11_start_refused_for_a_superseded_attempt(current: str | None) -> None:
    job = job_view(JobState.RESERVED, executions=0, current_attempt_id=current)
    decision = decide_start(job, ATTEMPT_ID)
    assert not decision.granted
    assert decision.execution_number == 0
    assert "superseded" in decision.reason


@pytest.mark.parametrize("state", [state for state in JobState if state is not JobState.RESERVED])
def test_r1_start_refused_unless_the_job_is_reserved(state: JobState) -> None:
    """A repeat start (already running), a cancelled or finished job: never a new execution."""
    decision = decide_start(job_view(state, executions=0), ATTEMPT_ID)
    assert not decision.granted
    assert decision.execution_number == 0
    assert state.value in decision.reason


@pytest.mark.parametrize(("executions", "max_executions"), [(3, 3), (1, 1), (100, 100), (4, 3)])
def test_r1_start_refused_when_the_budget_is_spent(executions: int, max_executions: int) -> None:
    job = job_view(JobState.RESERVED, executions=executions, max_executions=max_executions)
    decision = decide_start(job, ATTEMPT_ID)
    assert not decision.granted
    assert decision.execution_number == 0
    assert "budget" in decision.reason


def test_r1_a_superseded_attempt_is_refused_even_with_budget_and_the_right_state() -> None:
    job = job_view(JobState.RESERVED, executions=0, current_attempt_id=OTHER_ATTEMPT_ID)
    assert not decide_start(job, ATTEMPT_ID).granted
    assert decide_start(job, OTHER_ATTEMPT_ID).granted


def _run_until_terminal(job: JobRecord, report: Report, rng: EndOfRange) -> tuple[int, JobRecord, JobState]:
    """Drives claim -> start -> report until the job ends, as the service would.

    Returns the number of granted starts, the last view and the final state.
    """
    for starts in range(1, 1_000):
        job = dataclasses.replace(job, state=JobState.RESERVED)
        start = decide_start(job, ATTEMPT_ID)
        if not start.granted:
            raise AssertionError(f"start refused: {start.reason}")
        job = dataclasses.replace(job, state=JobState.RUNNING, executions=start.execution_number)
        decision = decide_result(job, report, NOW_MS, DETAIL_CAP, rng)
        assert can_transition(JobState.RUNNING, decision.job_state)
        if decision.job_state.terminal:
            return starts, job, decision.job_state
        assert decision.job_state is JobState.SCHEDULED
    raise AssertionError("the job never ended")


@pytest.mark.parametrize("max_executions", [1, 2, 3, 5, 100])
@pytest.mark.parametrize("outcome", [Outcome.RETRYABLE_FAILURE, Outcome.TIMED_OUT, Outcome.INTERRUPTED])
def test_r1_a_job_that_always_fails_runs_exactly_max_executions_times(
    max_executions: int, outcome: Outcome, low_rng: EndOfRange
) -> None:
    """MaxExecutions(3) means the first run plus up to two retries, then failed."""
    job = job_view(JobState.AVAILABLE, executions=0, max_executions=max_executions)
    starts, last, final = _run_until_terminal(job, Report(outcome, error_code="boom"), low_rng)
    assert starts == max_executions
    assert last.executions == max_executions
    assert final is JobState.FAILED
    assert not decide_start(dataclasses.replace(last, state=JobState.RESERVED), ATTEMPT_ID).granted


def test_r1_a_job_that_succeeds_first_time_uses_one_execution(low_rng: EndOfRange) -> None:
    job = job_view(JobState.AVAILABLE, executions=0)
    starts, _, final = _run_until_terminal(job, Report(Outcome.SUCCEEDED), low_rng)
    assert (starts, final) == (1, JobState.SUCCEEDED)


# --- new jobs --------------------------------------------------------------------------


def test_new_job_with_a_future_run_at_is_scheduled() -> None:
    assert initial_state(NOW_MS + 1, NOW_MS) is JobState.SCHEDULED
    assert initial_state(NOW_MS + 86_400_000, NOW_MS) is JobState.SCHEDULED


@pytest.mark.parametrize("run_at_ms", [NOW_MS, NOW_MS - 1, 0])
def test_new_job_due_now_or_in_the_past_is_available(run_at_ms: int) -> None:
    assert initial_state(run_at_ms, NOW_MS) is JobState.AVAILABLE


# --- release ---------------------------------------------------------------------


@pytest.mark.parametrize("streak", [0, 1, 4])
def test_r12_release_makes_the_job_available_at_once_without_charge(streak: int) -> None:
    job = job_view(JobState.RESERVED, executions=1, unstarted_streak=streak)
    decision = decide_release(job, NOW_MS)
    assert decision.attempt_outcome is Outcome.RELEASED
    assert decision.job_state is JobState.AVAILABLE
    assert decision.error_code is None
    assert decision.run_at_ms == NOW_MS
    assert decision.retry_delay_ms is None
    assert decision.unstarted_streak == streak, "a release is not an unstarted abandonment"
    assert can_transition(JobState.RESERVED, decision.job_state)


def test_r12_many_releases_never_fail_the_job_nor_spend_its_budget() -> None:
    job = job_view(JobState.RESERVED, executions=2, unstarted_streak=0, max_unstarted_abandonments=1)
    for _ in range(50):
        decision = decide_release(job, NOW_MS)
        assert decision.job_state is JobState.AVAILABLE
        job = dataclasses.replace(job, unstarted_streak=decision.unstarted_streak)
    assert job.unstarted_streak == 0
    assert decide_start(job, ATTEMPT_ID) == StartDecision(True, execution_number=3)
