"""States, outcomes and the declarative transition table (docs/concepts.md, R-5, R-9)."""

from __future__ import annotations

import pytest

from coordinator.domain.states import (
    DEFAULT_CODES,
    RETRYABLE_OUTCOMES,
    TERMINAL_STATES,
    TRANSITIONS,
    WORKER_OUTCOMES,
    JobState,
    Outcome,
    can_transition,
    is_claimable,
)
from worker_sdk.grammar import is_valid_code


def test_states_match_the_spec_glossary() -> None:
    assert {state.value for state in JobState} == {
        "scheduled",
        "waiting",
        "available",
        "reserved",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    }


@pytest.mark.parametrize("state", list(JobState))
def test_terminal_states_are_succeeded_failed_cancelled(state: JobState) -> None:
    assert state.terminal == (state in {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
    assert state.terminal == (state in TERMINAL_STATES)


def test_transition_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for source, targets in TRANSITIONS.items():
        assert source not in targets, f"{source} lists itself"


def test_a_succeeded_job_never_changes() -> None:
    assert all(not can_transition(JobState.SUCCEEDED, target) for target in JobState)


@pytest.mark.parametrize("state", [JobState.FAILED, JobState.CANCELLED])
def test_r9_failed_and_cancelled_jobs_leave_only_by_manual_retry(state: JobState) -> None:
    """A manual retry makes the job available, or waiting when parents have still to
    succeed (R-15); nothing else leaves these states."""
    assert [target for target in JobState if can_transition(state, target)] == [
        JobState.WAITING,
        JobState.AVAILABLE,
    ]


@pytest.mark.parametrize("state", [s for s in JobState if not s.terminal])
def test_r8_every_live_state_can_be_cancelled(state: JobState) -> None:
    assert can_transition(state, JobState.CANCELLED)


def test_r1_only_a_reserved_job_starts_running() -> None:
    assert [source for source in JobState if can_transition(source, JobState.RUNNING)] == [JobState.RESERVED]


@pytest.mark.parametrize("source", [JobState.AVAILABLE, JobState.SCHEDULED])
def test_claims_reserve_available_or_due_scheduled_jobs(source: JobState) -> None:
    assert can_transition(source, JobState.RESERVED)


def test_r5_retryable_outcomes_match_the_table() -> None:
    table = {Outcome.RETRYABLE_FAILURE, Outcome.TIMED_OUT, Outcome.INTERRUPTED, Outcome.ABANDONED}
    assert table == RETRYABLE_OUTCOMES


def test_r5_workers_cannot_report_coordinator_outcomes() -> None:
    """Abandonment and release are the coordinator's to record, never a worker's Result."""
    coordinator_only = {Outcome.ABANDONED, Outcome.UNSTARTED_ABANDONED, Outcome.RELEASED}
    assert coordinator_only.isdisjoint(WORKER_OUTCOMES)
    assert WORKER_OUTCOMES | coordinator_only == set(Outcome)


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (Outcome.TIMED_OUT, "timeout"),
        (Outcome.CANCELLED, "cancelled"),
        (Outcome.INTERRUPTED, "worker_shutdown"),
        (Outcome.ABANDONED, "lease_expired"),
    ],
)
def test_r5_default_codes_from_the_table(outcome: Outcome, code: str) -> None:
    assert DEFAULT_CODES[outcome] == code


def test_r5_every_default_code_follows_the_grammar() -> None:
    assert all(is_valid_code(code) for code in DEFAULT_CODES.values())


def test_every_named_change_of_the_domain_stays_inside_the_transition_table() -> None:
    """``domain.changes`` builds each write; ``JobChange`` refuses what TRANSITIONS does
    not allow, so the table is enforced on every store write."""
    import dataclasses

    from coordinator.domain import changes
    from coordinator.domain.records import JobRecord

    settings = [3, 1, 2, None, 5, 1, 2]
    lifecycle = [1, 0, 0, None, None, None, 0, 0, None, None, None, 1, False]
    job = JobRecord("j", "w", "q", JobState.AVAILABLE, 0, 0, b"", 1, None, *settings, *lifecycle)
    claimed = changes.claimed(job, "a", "worker", 10)
    assert changes.JobChange(job, claimed).after.state is JobState.RESERVED
    running = changes.started(claimed, 1)
    assert changes.JobChange(claimed, running).after.state is JobState.RUNNING
    cancelled = changes.cancelled(running, 5)
    assert changes.JobChange(running, cancelled).after.state is JobState.CANCELLED
    retried = changes.retried(cancelled, 2, 6)
    assert changes.JobChange(cancelled, retried).after.state is JobState.AVAILABLE
    for source, target in [
        (JobState.SUCCEEDED, JobState.AVAILABLE),
        (JobState.AVAILABLE, JobState.RUNNING),
        (JobState.AVAILABLE, JobState.SUCCEEDED),
        (JobState.SCHEDULED, JobState.FAILED),
    ]:
        before = dataclasses.replace(job, state=source)
        with pytest.raises(changes.IllegalTransition):
            changes.JobChange(before, dataclasses.replace(job, state=target))


@pytest.mark.parametrize("state", list(JobState))
def test_r17_a_job_is_claimable_when_available_or_scheduled_and_due(state: JobState) -> None:
    """docs/rules.md R-17, stated here independently of the domain's constants."""
    in_claimable_state = state in {JobState.AVAILABLE, JobState.SCHEDULED}
    now = 1_000_000
    assert is_claimable(state, now - 1, now) is in_claimable_state
    assert is_claimable(state, now, now) is in_claimable_state  # due at its run-at exactly
    assert is_claimable(state, now + 1, now) is False
