"""Job states, attempt outcomes and the declarative transition table (docs/concepts.md, R-5)."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    SCHEDULED = "scheduled"
    WAITING = "waiting"
    AVAILABLE = "available"
    RESERVED = "reserved"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# States a claim may take a job from (a due scheduled job is claimable directly).
CLAIMABLE_STATES = frozenset({JobState.AVAILABLE, JobState.SCHEDULED})
LEASED_STATES = frozenset({JobState.RESERVED, JobState.RUNNING})


def is_claimable(state: JobState, run_at_ms: int, now_ms: int) -> bool:
    """R-17: whether a claim may take a job now: in a claimable state, and due. The one
    rule of it; the store's SQL text of it is generated from ``CLAIMABLE_STATES``."""
    return state in CLAIMABLE_STATES and run_at_ms <= now_ms


class Outcome(StrEnum):
    """How one attempt ended."""

    SUCCEEDED = "succeeded"
    RETRYABLE_FAILURE = "retryable_failure"
    PERMANENT_FAILURE = "permanent_failure"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"
    UNSTARTED_ABANDONED = "unstarted_abandoned"
    RELEASED = "released"


# Outcomes a worker may report in a Result; the others are the coordinator's to record.
WORKER_OUTCOMES = frozenset(
    {
        Outcome.SUCCEEDED,
        Outcome.RETRYABLE_FAILURE,
        Outcome.PERMANENT_FAILURE,
        Outcome.TIMED_OUT,
        Outcome.CANCELLED,
        Outcome.INTERRUPTED,
    }
)
# outcomes retried while the execution budget lasts.
RETRYABLE_OUTCOMES = frozenset(
    {Outcome.RETRYABLE_FAILURE, Outcome.TIMED_OUT, Outcome.INTERRUPTED, Outcome.ABANDONED}
)

# Codes the lifecycle itself assigns.
CODE_TIMEOUT = "timeout"
CODE_CANCELLED = "cancelled"
CODE_WORKER_SHUTDOWN = "worker_shutdown"
CODE_LEASE_EXPIRED = "lease_expired"
CODE_UNSTARTED_LEASE_EXPIRED = "unstarted_lease_expired"
CODE_RESERVATION_ABANDONMENT_EXHAUSTED = "reservation_abandonment_exhausted"
CODE_PAYLOAD_UNDECODABLE = "payload_undecodable"
CODE_OUTPUT_TOO_LARGE = "output_too_large"
CODE_NEGATIVE_RETRY_DELAY = "negative_retry_delay"
CODE_PARENT_FAILED = "parent_failed"
"""R-15: a parent ended failed or cancelled, so its waiting descendants fail unrun."""

# The default code of each outcome when the worker sent none.
DEFAULT_CODES = {
    Outcome.TIMED_OUT: CODE_TIMEOUT,
    Outcome.CANCELLED: CODE_CANCELLED,
    Outcome.INTERRUPTED: CODE_WORKER_SHUTDOWN,
    Outcome.ABANDONED: CODE_LEASE_EXPIRED,
    Outcome.UNSTARTED_ABANDONED: CODE_UNSTARTED_LEASE_EXPIRED,
    Outcome.RETRYABLE_FAILURE: "error",
    Outcome.PERMANENT_FAILURE: "permanent_failure",
}

# Which state changes the lifecycle may make; every store write is checked against it.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.SCHEDULED: frozenset({JobState.AVAILABLE, JobState.RESERVED, JobState.CANCELLED}),
    JobState.WAITING: frozenset(
        {JobState.AVAILABLE, JobState.SCHEDULED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.AVAILABLE: frozenset({JobState.RESERVED, JobState.CANCELLED}),
    JobState.RESERVED: frozenset(
        {JobState.RUNNING, JobState.AVAILABLE, JobState.SCHEDULED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.SCHEDULED, JobState.AVAILABLE, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    # A manual retry: available, or waiting when parents have still to succeed.
    JobState.FAILED: frozenset({JobState.AVAILABLE, JobState.WAITING}),
    JobState.CANCELLED: frozenset({JobState.AVAILABLE, JobState.WAITING}),
}


def can_transition(source: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[source]
