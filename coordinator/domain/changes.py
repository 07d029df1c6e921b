"""The job's next record for each thing that can happen to it, as named constructors
(claimed, started, ended, cancelled, ...), and the transition table's guard.

Each constructor takes the job as read and returns it as it must be written; the store
writes only the fields that differ, guarded by the state and history sequence read
(R-11). ``check_transition`` refuses a state change the table does not allow: it is a
bug in the caller, never a client's fault.
"""

from __future__ import annotations

from typing import NamedTuple

from coordinator.domain.evolve import evolve
from coordinator.domain.lifecycle import Decision
from coordinator.domain.records import JobRecord
from coordinator.domain.states import CODE_CANCELLED, CODE_PARENT_FAILED, JobState, can_transition

CLAIMED = "claimed"
"""The reason of a claim's transition (available or scheduled to reserved)."""
STARTED = "started"
"""The reason of a start's transition (reserved to running). The store keeps no row for
it: the attempt's start stamps it, and the job's history reads it back from there, one
sequence number after its claim (``store.history``)."""


class _JobChangeFields(NamedTuple):
    before: JobRecord
    after: JobRecord
    reason: str | None
    attempt_id: str | None


class JobChange(_JobChangeFields):
    """One guarded job write: the job as read, as it must be written, and the
    transition it records. Refuses a transition the table does not allow.

    A named tuple checked in ``__new__``, not a frozen dataclass: the writer builds one
    per job per transaction, and the dataclass's guarded field stores cost five times
    the tuple."""

    __slots__ = ()

    def __new__(
        cls, before: JobRecord, after: JobRecord, reason: str | None = None, attempt_id: str | None = None
    ) -> JobChange:
        check_transition(before, after)
        return tuple.__new__(cls, (before, after, reason, attempt_id))


class IllegalTransition(AssertionError):
    """A write would make a state change ``TRANSITIONS`` does not allow."""


def check_transition(before: JobRecord, after: JobRecord) -> None:
    """Raises IllegalTransition unless ``after`` keeps the state or the table allows it."""
    if before.state is not after.state and not can_transition(before.state, after.state):
        raise IllegalTransition(
            f"job {before.id}: {before.state.value} -> {after.state.value} is not in TRANSITIONS"
        )


def claimed(job: JobRecord, attempt_id: str, worker_id: str, lease_until_ms: int) -> JobRecord:
    return evolve(
        job,
        state=JobState.RESERVED,
        current_attempt_id=attempt_id,
        worker_id=worker_id,
        lease_expires_at_ms=lease_until_ms,
    )


def started(job: JobRecord, execution_number: int) -> JobRecord:
    return evolve(job, state=JobState.RUNNING, executions=execution_number, unstarted_streak=0)


def attempt_ended(job: JobRecord, decision: Decision, now_ms: int, output: bytes | None) -> JobRecord:
    """The job after its current attempt ended as ``decision`` says (R-4 to R-6, R-12)."""
    job_code = decision.job_error_code or decision.error_code
    return evolve(
        job,
        state=decision.job_state,
        current_attempt_id=None,
        worker_id=None,
        lease_expires_at_ms=None,
        unstarted_streak=decision.unstarted_streak,
        last_error_code=job.last_error_code if job_code is None else job_code,
        run_at_ms=job.run_at_ms if decision.run_at_ms is None else decision.run_at_ms,
        finished_at_ms=now_ms if decision.job_state.terminal else job.finished_at_ms,
        output=job.output if output is None else output,
    )


def cancelled(job: JobRecord, now_ms: int) -> JobRecord:
    """R-8: a job that is not running ends cancelled at once."""
    return evolve(
        job,
        state=JobState.CANCELLED,
        finished_at_ms=now_ms,
        last_error_code=CODE_CANCELLED,
        current_attempt_id=None,
        worker_id=None,
        lease_expires_at_ms=None,
    )


def cancel_requested(job: JobRecord) -> JobRecord:
    """R-8: a running job is flagged; its worker is asked to stop the handler."""
    return evolve(job, cancel_requested=True)


def retried(job: JobRecord, generation: int, now_ms: int, *, waiting: bool = False) -> JobRecord:
    """R-9: the next generation with fresh budgets, available now (or, with ``waiting``,
    waiting for parents that have still to succeed, R-15)."""
    return evolve(
        job,
        state=JobState.WAITING if waiting else JobState.AVAILABLE,
        generation=generation,
        executions=0,
        unstarted_streak=0,
        run_at_ms=now_ms,
        finished_at_ms=None,
        last_error_code=None,
        output=None,
        cancel_requested=False,
        current_attempt_id=None,
        worker_id=None,
        lease_expires_at_ms=None,
    )


def due(job: JobRecord) -> JobRecord:
    """A scheduled job whose run-at has come."""
    return evolve(job, state=JobState.AVAILABLE)


def parent_failed(job: JobRecord, now_ms: int) -> JobRecord:
    """R-15: a waiting job whose parent failed or was cancelled ends failed, unrun."""
    return evolve(job, state=JobState.FAILED, finished_at_ms=now_ms, last_error_code=CODE_PARENT_FAILED)


def released(job: JobRecord, state: JobState) -> JobRecord:
    """R-15: a waiting job whose last parent succeeded: available (or scheduled)."""
    return evolve(job, state=state)
