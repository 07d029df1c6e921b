"""What the client reads back: job states, jobs and attempts, as plain Python values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from worker_sdk._progress import ProgressReport
from worker_sdk._results import Outcome
from worker_sdk._settings import JobSettings


class JobState(StrEnum):
    """A job's lifecycle state (docs/concepts.md)."""

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
    """The jobs that must succeed first (R-15); filled by ``get_job`` and ``wait``."""
    child_ids: tuple[str, ...] = ()
    """The jobs that name this one as a parent; filled by ``get_job`` and ``wait``."""
    cancel_requested: bool = False
    """A cancel reached the job while it ran; it ends cancelled unless the run succeeds."""
    progress: ProgressReport | None = None
    """The latest progress the current attempt's handler reported (``get_job`` only)."""
    traceparent: str | None = None
    """The W3C ``traceparent`` the job was enqueued with (docs/observability.md); None
    when it came without a trace context (a schedule's tick, a client without tracing)."""
    tracestate: str | None = None
    """Its ``tracestate``; None when empty."""
    concurrency_key: str = ""
    """The key a queue's per-key limit counts the job under; '' is the implicit key of
    every job enqueued without one (docs/flow-control.md)."""
    waiting_reason: str | None = None
    """``get`` only: why a claimable job is held back (``queue_paused``, ``queue_limit``,
    ``key_limit``, or ``rate`` when its queue's or key's rate has no room in the current
    window); None when nothing holds it back."""

    @property
    def terminal(self) -> bool:
        """True once the job is succeeded, failed or cancelled."""
        return self.state.terminal

    @property
    def cancel_pending(self) -> bool:
        """A cancel reached the job's run and the run has not ended yet (``cancel_requested``
        stays set once the job has ended, as a record of how it ended)."""
        return self.cancel_requested and not self.terminal


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """One claim of a job by a worker (docs/concepts.md). Message and full text need a reveal."""

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


@dataclass(frozen=True, slots=True)
class EnqueuedJob:
    """What the coordinator answered for one job of ``enqueue_raw``."""

    id: str
    existing: bool
    """True when the idempotency key matched an earlier job, returned instead (R-14)."""
    state: JobState
    """The job's state right after the enqueue (or the existing job's state)."""


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """An API token as the coordinator lists it: never its secret (R-20, R-21)."""

    id: str
    name: str
    """A label for people, e.g. ``billing-worker``."""
    scopes: tuple[str, ...]
    """Any of ``enqueue``, ``read``, ``manage``, ``reveal``, ``work``, ``admin``."""
    queues: tuple[str, ...] = ()
    """For ``work`` and ``enqueue`` tokens: the only queues it may take jobs from,
    enqueue into and name parents in; empty = any."""
    created_at: datetime | None = None
    created_by: str | None = None
    """The ID of the token that created this one; None for the bootstrap token."""
    revoked_at: datetime | None = None
    """None while the token is valid."""

    @property
    def revoked(self) -> bool:
        """True once the token was revoked."""
        return self.revoked_at is not None


@dataclass(frozen=True, slots=True)
class CreatedToken:
    """A token just created by ``create_token``, with its secret."""

    token: TokenInfo
    secret: str
    """The bearer token to send (``token=`` of the clients and the worker). The
    coordinator keeps only its hash: this is the only time it is shown."""


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audited action (R-22): who, what, on which target, when and from where."""

    id: int
    """Increases with every event."""
    action: str
    """E.g. ``job.cancel``, ``job.retry``, ``attempt.reveal_error``, ``token.create``."""
    target: str
    """The job, attempt or token ID the action was about."""
    actor_name: str
    """The acting token's name (``coordinator`` for the coordinator itself)."""
    actor_token_id: str | None = None
    """None when authentication is off or for the coordinator itself."""
    at: datetime | None = None
    peer: str = ""
    """The caller's address as gRPC reports it, e.g. ``ipv4:10.0.0.7:51234``."""
    detail: str | None = None
    """What changed; never error text."""
