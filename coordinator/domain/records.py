"""The values the coordinator's layers pass each other: jobs, attempts, tokens, audit
events, and an enqueue request. Plain frozen dataclasses; the store turns them into rows
and back, the API into messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from coordinator.domain.access import Scope
from coordinator.domain.settings import JobSettings, SettingsLayer
from coordinator.domain.states import JobState, Outcome

DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as the store holds it."""

    id: str
    wire_name: str
    queue: str
    state: JobState
    priority: int
    run_at_ms: int
    payload: bytes
    payload_version: int
    idempotency_key: str | None
    max_executions: int
    retry_initial_delay_ms: int
    retry_max_delay_ms: int
    execution_timeout_ms: int | None
    max_unstarted_abandonments: int
    unstarted_initial_delay_ms: int
    unstarted_max_delay_ms: int
    generation: int
    executions: int
    unstarted_streak: int
    current_attempt_id: str | None
    worker_id: str | None
    lease_expires_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None
    last_error_code: str | None
    output: bytes | None
    history_seq: int
    """How many transitions the job has made; every write is guarded by it (R-11)."""
    cancel_requested: bool
    unique_key: str | None = None
    """While this job has not ended, an enqueue of its wire name with the same key
    returns it instead of creating another."""
    traceparent: str | None = None
    """The W3C trace context the job was enqueued with (``worker_sdk.trace_rules``),
    handed to the worker that runs it; None when it came with none."""
    tracestate: str | None = None
    """That trace context's ``tracestate`` (None: empty or no trace context)."""
    concurrency_key: str = ""
    """The key the queue's per-key running limit counts the job under ('' = the
    implicit key every job without one shares; docs/flow-control.md)."""

    @property
    def cancel_pending(self) -> bool:
        """A cancel reached the job's run and the run has not ended yet (the flag stays
        set once the job has ended)."""
        return self.cancel_requested and not self.state.terminal

    @property
    def settings(self) -> JobSettings:
        return JobSettings(
            max_executions=self.max_executions,
            retry_initial_delay_ms=self.retry_initial_delay_ms,
            retry_max_delay_ms=self.retry_max_delay_ms,
            execution_timeout_ms=self.execution_timeout_ms,
            max_unstarted_abandonments=self.max_unstarted_abandonments,
            unstarted_initial_delay_ms=self.unstarted_initial_delay_ms,
            unstarted_max_delay_ms=self.unstarted_max_delay_ms,
        )


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One claim of a job by a worker, and how it ended."""

    id: str
    job_id: str
    generation: int
    worker_id: str
    execution_number: int
    claimed_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    outcome: Outcome | None
    error_code: str | None
    exception_type: str | None
    message: str | None
    detail: str | None
    retry_delay_ms: int | None
    job_state_after: JobState | None
    reported: bool
    token_id: str | None = None
    """The token of the stream that claimed it (None with authentication off)."""
    progress: str | None = None
    """The latest progress report, stored form (``domain.progress.decode_progress``)."""


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Who sent a worker-protocol message: the stream's worker ID and the token it
    connected with (None with authentication off), with that token's queue restriction.

    Only the stream that holds a claim may act on its attempt (start, heartbeat, result,
    release): the same worker ID with the same token, on whichever replica.
    """

    worker_id: str
    token_id: str | None = None
    queues: frozenset[str] | None = None
    """The token's queues (None: any queue)."""

    def holds(self, attempt: AttemptRecord, queue: str) -> bool:
        """Whether this stream may act on ``attempt`` (of a job in ``queue``)."""
        return (
            attempt.worker_id == self.worker_id
            and attempt.token_id == self.token_id
            and (self.queues is None or queue in self.queues)
        )


class NewAttempt(NamedTuple):
    """An attempt as a claim creates it. A named tuple, as ``AttemptEnd``: one is built
    per claim in the writer, where a frozen dataclass's ``__init__`` (a guarded store per
    field) cost several times the tuple's."""

    id: str
    job_id: str
    generation: int
    worker_id: str
    claimed_at_ms: int
    token_id: str | None = None

    def record(self) -> AttemptRecord:
        """The attempt as a read of its row gives it, before it started (a transaction's
        own claims, without reading them back: ``dispatch.joined_starts``)."""
        return AttemptRecord(
            id=self.id,
            job_id=self.job_id,
            generation=self.generation,
            worker_id=self.worker_id,
            execution_number=0,
            claimed_at_ms=self.claimed_at_ms,
            started_at_ms=None,
            finished_at_ms=None,
            outcome=None,
            error_code=None,
            exception_type=None,
            message=None,
            detail=None,
            retry_delay_ms=None,
            job_state_after=None,
            reported=False,
            token_id=self.token_id,
        )


class AttemptEnd(NamedTuple):
    """How an attempt ended, written once (an attempt that has an outcome keeps it)."""

    attempt_id: str
    finished_at_ms: int
    outcome: Outcome
    job_state_after: JobState
    reported: bool
    """The worker reported it (a result or a release), rather than the coordinator."""
    error_code: str | None = None
    exception_type: str | None = None
    message: str | None = None
    detail: str | None = None
    retry_delay_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Dependency:
    """A child's dependency on a parent (R-15); the parent's output is kept here once it
    succeeded (R-16), so the child can read it even after the parent is purged."""

    child_id: str
    parent_id: str
    satisfied: bool = False
    parent_output: bytes | None = None
    parent_queue: str | None = None
    """The parent's queue: its output goes only to workers whose token may serve it."""


@dataclass(frozen=True, slots=True)
class Relatives:
    """A job's parents and children, by ID, in ID order."""

    parent_ids: tuple[str, ...] = ()
    child_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A queue and its controls (R-17)."""

    name: str
    paused: bool = False
    concurrency_limit: int | None = None
    """Most jobs of the queue reserved or running at once, across every worker and
    replica; None: no limit."""
    key_limit: int | None = None
    """Most jobs of one concurrency key of the queue reserved or running at once, across
    every worker and replica; None: no limit (docs/flow-control.md)."""
    keyed: bool = False
    """A job with a concurrency key was enqueued to the queue: its claims take keys in
    turn (``store.claim_turns``). Set by the enqueue, never cleared while the queue exists."""
    created_at_ms: int = 0
    updated_at_ms: int = 0
    rate_count: int | None = None
    """Most starts per ``rate_period_ms`` (``domain.rates``); None: no rate."""
    rate_period_ms: int | None = None
    rate_per_key: bool = False
    """The rate holds for each concurrency key of the queue, not the queue as a whole."""

    @property
    def free(self) -> bool:
        """Whether claims take from the queue as they find its jobs: not paused, and no
        limit or rate whose count they must keep (``store.claims`` tests the same in
        SQL)."""
        return (
            not self.paused
            and self.concurrency_limit is None
            and self.key_limit is None
            and self.rate_count is None
        )


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A queue with its jobs counted per state."""

    queue: QueueRecord
    counts: dict[JobState, int]
    oldest_due_run_at_ms: int | None
    """The run-at of the queue's oldest claimable job that is due; None when none is."""
    active_keys: int | None = None
    """A queue with a per-key limit or rate: its concurrency keys with reserved or running
    jobs."""
    keys_at_limit: int | None = None
    """A queue with a per-key limit: those of its keys at the limit."""
    first_keys_at_limit: tuple[str, ...] = ()
    """The first of those (``KEYS_NAMED``, in order of the keys)."""
    keys_at_rate: int | None = None
    """A queue with a per-key rate: its keys whose window is full now (their starts in
    the window and reserved jobs reach the count)."""
    first_keys_at_rate: tuple[str, ...] = ()
    """The first of those (``KEYS_NAMED``, in order of the keys)."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One entry of a job's history."""

    job_id: str
    seq: int
    at_ms: int
    from_state: JobState | None
    to_state: JobState
    attempt_id: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    name: str
    secret_sha256: str
    scopes: frozenset[Scope]
    queues: frozenset[str] | None
    created_at_ms: int
    created_by: str | None
    revoked_at_ms: int | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at_ms is not None


@dataclass(frozen=True, slots=True)
class AuditEvent:
    at_ms: int
    actor_token_id: str | None
    actor_name: str
    action: str
    target: str
    peer: str
    detail: str | None = None
    id: int | None = None
    """Assigned by the database; None before the insert."""


@dataclass(frozen=True, slots=True)
class NewJobSpec:
    """An enqueue request for one job, already decoded from the wire."""

    wire_name: str
    payload: bytes
    queue: str = DEFAULT_QUEUE
    payload_version: int = 1
    priority: int = 0
    run_at_ms: int | None = None
    idempotency_key: str | None = None
    settings: SettingsLayer = field(default_factory=SettingsLayer)
    parent_ids: tuple[str, ...] = ()
    """Jobs that must succeed first (R-15), as the client sent them: existing jobs, or
    jobs of the same batch named by the ``job_id`` they are given."""
    job_id: str | None = None
    """A client-chosen ID (a UUID; UUIDv7 keeps the time order), so jobs of one batch can
    name each other as parents; None lets the coordinator choose."""
    unique_key: str | None = None
    """At most one unfinished job per wire name with this key: while one exists, this
    enqueue returns it."""
    traceparent: str | None = None
    """The enqueuer's W3C ``traceparent``, not yet checked (``worker_sdk.trace_rules``);
    None for a job without a trace context."""
    tracestate: str | None = None
    """Its ``tracestate``; None when empty."""
    concurrency_key: str = ""
    """The job's concurrency key ('' = the implicit key; docs/flow-control.md)."""


@dataclass(frozen=True, slots=True)
class Enqueued:
    job_id: str
    state: JobState
    existing: bool


@dataclass(frozen=True, slots=True)
class FinishedMinute:
    """How many jobs of a queue ended in a terminal state during one minute (the
    dashboard's throughput and failure rate)."""

    minute_ms: int
    """The minute's start, a multiple of 60,000 ms."""
    queue: str
    state: JobState
    count: int


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """A worker holding leases right now, on whichever replica it is connected to."""

    worker_id: str
    reserved: int
    running: int


@dataclass(frozen=True, slots=True)
class WorkerStream:
    """A worker stream open on this coordinator, as the dashboard shows it (the admin
    API's ``list_workers`` answers ``app.workers.ConnectedWorker``, with its in-flight
    count read from the store)."""

    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    capacity: int
    credit: int
    """How many more jobs it has asked for and not been given yet."""
    lease_ms: int
    token_id: str | None
    draining: bool
    host: str = ""
    """The host the worker said it runs on ('' when it did not say)."""
    sdk: str = ""
    """The SDK and version it said it runs ('' when it did not say)."""
    connected_at_ms: int | None = None
    last_heartbeat_ms: int | None = None
    """Its last heartbeat on this stream (None: none yet; an idle worker sends none)."""
