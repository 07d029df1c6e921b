"""What the client reads back: job states, jobs and attempts, as plain Python values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from worker_sdk._results import Outcome
from worker_sdk._settings import JobSettings


class JobState(StrEnum):
    """A job's lifecycle state (SPEC §2)."""

    SCHEDULED = "scheduled"
    """Run-at in the future, or waiting out a retry delay."""
    WAITING = "waiting"
    """Parents not yet succeeded."""
    AVAILABLE = "available"
    RESERVED = "reserved"
    """Claimed by a worker; the handler was not yet authorized."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for ``succeeded``, ``failed`` and ``cancelled``."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as the coordinator reported it. Times are timezone-aware UTC.

    ``payload`` and ``output`` are empty/None in ``list_jobs`` results (lists leave them
    out); ``output`` is set only for a succeeded job whose handler returned bytes.
    """

    id: str
    wire_name: str
    queue: str
    state: JobState
    payload: bytes
    payload_version: int
    priority: int
    settings: JobSettings
    executions: int
    """Started runs in the current generation (R-1)."""
    unstarted_abandonments: int
    """Consecutive claims that lapsed before start (R-4)."""
    generation: int
    run_at: datetime | None = None
    idempotency_key: str | None = None
    current_attempt_id: str | None = None
    lease_expires_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    last_error_code: str | None = None
    output: bytes | None = None
    parent_ids: tuple[str, ...] = ()
    cancel_requested: bool = False
    """A cancel reached the job while it ran; it ends cancelled unless the run succeeds."""

    @property
    def terminal(self) -> bool:
        """True once the job is succeeded, failed or cancelled."""
        return self.state.terminal


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """One claim of a job by a worker (SPEC §2). Message and full text need a reveal."""

    id: str
    job_id: str
    generation: int
    worker_id: str
    execution_number: int
    """The execution this run was; 0 when it never started."""
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    outcome: Outcome | None = None
    """None while the attempt is in progress."""
    error_code: str | None = None
    exception_type: str | None = None
    retry_delay: timedelta | None = None
    """The delay chosen before the next try, if the job was retried."""


@dataclass(frozen=True, slots=True)
class RevealedError:
    """An attempt's error text, from ``reveal_error``: every reveal is audited (R-22)."""

    attempt_id: str
    job_id: str
    generation: int
    error_code: str | None
    exception_type: str | None
    message: str
    """The exception message; empty when the attempt recorded none."""
    detail: str
    """The full exception text (traceback), capped with a truncation marker."""
