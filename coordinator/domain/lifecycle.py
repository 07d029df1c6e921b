"""Decisions of the job lifecycle (R-1, R-2, R-4 to R-12, R-14).

Each function takes what it needs as plain values (the job as the store has it, the
time, a random source) and returns a decision value; the service carries it out with a
conditional write guarded by the job's state and current attempt ID (R-11).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, Protocol

from coordinator.domain.backoff import RandomSource, retry_delay_ms, unstarted_delay_ms
from coordinator.domain.states import (
    CODE_CANCELLED,
    CODE_NEGATIVE_RETRY_DELAY,
    CODE_RESERVATION_ABANDONMENT_EXHAUSTED,
    DEFAULT_CODES,
    RETRYABLE_OUTCOMES,
    JobState,
    Outcome,
)
from worker_sdk.grammar import (
    MAX_FAILURE_MESSAGE_BYTES,
    TRUNCATION_MARKER,
    coerce_code,
    truncate_utf8,
)


class JobView(Protocol):
    """What the lifecycle needs to know of a job: a ``JobRecord`` as read is one. A
    protocol, not a value of its own, so the hot path hands the decisions the record it
    holds instead of building a copy of these fields a job."""

    @property
    def state(self) -> JobState: ...
    @property
    def executions(self) -> int:
        """Started runs in the current generation."""

    @property
    def unstarted_streak(self) -> int:
        """Consecutive claims whose lease lapsed before start (R-4)."""

    @property
    def current_attempt_id(self) -> str | None: ...
    @property
    def cancel_requested(self) -> bool:
        """A user cancelled the job while it ran (R-8): any end short of success cancels it."""

    @property
    def generation(self) -> int:
        """Starts at 1; each manual retry starts the next (R-9)."""

    @property
    def lease_expires_at_ms(self) -> int | None:
        """When the current claim's lease lapses (R-4, R-10)."""

    # The job's settings, as ``JobSettings`` names them (copied onto it at enqueue).
    @property
    def max_executions(self) -> int: ...
    @property
    def retry_initial_delay_ms(self) -> int: ...
    @property
    def retry_max_delay_ms(self) -> int: ...
    @property
    def max_unstarted_abandonments(self) -> int: ...
    @property
    def unstarted_initial_delay_ms(self) -> int: ...
    @property
    def unstarted_max_delay_ms(self) -> int: ...


class Report(NamedTuple):
    """An attempt's end as the worker reports it. Named tuples, as ``Decision`` and
    ``StartDecision``: one of each is made per job in the writer, where a frozen
    dataclass's guarded field stores cost several times a tuple."""

    outcome: Outcome
    error_code: str = ""
    exception_type: str = ""
    message: str = ""
    detail: str = ""
    explicit_retry_delay_ms: int | None = None
    """Middleware ``Retry(reason, delay)``: None uses R-2; negative is a contract fault."""


class Decision(NamedTuple):
    """What to write when an attempt ends."""

    attempt_outcome: Outcome
    job_state: JobState
    error_code: str | None
    run_at_ms: int | None = None
    """When the job becomes claimable again (state ``scheduled``)."""
    retry_delay_ms: int | None = None
    unstarted_streak: int = 0
    message: str = ""
    detail: str = ""
    job_error_code: str | None = None
    """The job's last error code when it is not the attempt's: a run that was asked to
    cancel (R-8) and ended another way keeps its own outcome and code on the attempt."""


class StartDecision(NamedTuple):
    granted: bool
    execution_number: int = 0
    reason: str = ""


def initial_state(run_at_ms: int, now_ms: int) -> JobState:
    """A new job without parents: available now, or scheduled for later."""
    return JobState.SCHEDULED if run_at_ms > now_ms else JobState.AVAILABLE


def decide_start(job: JobView, attempt_id: str, now_ms: int | None = None) -> StartDecision:
    """R-1: authorizing the handler is what charges an execution.

    Only the current attempt of a reserved job may start, only while its lease holds
    (given ``now_ms``: a lapsed claim is the expiry pass's to recover, R-4) and only
    while budget remains.
    """
    if job.current_attempt_id != attempt_id:
        return StartDecision(False, reason="superseded attempt")
    if job.state is not JobState.RESERVED:
        return StartDecision(False, reason=f"job is {job.state.value}")
    if now_ms is not None and job.lease_expires_at_ms is not None and job.lease_expires_at_ms <= now_ms:
        return StartDecision(False, reason="lease lapsed")
    if job.executions >= job.max_executions:
        return StartDecision(False, reason="execution budget spent")
    return StartDecision(True, execution_number=job.executions + 1)


def decide_result(
    job: JobView,
    report: Report,
    now_ms: int,
    max_failure_detail_bytes: int,
    rng: RandomSource,
    *,
    max_message_bytes: int = MAX_FAILURE_MESSAGE_BYTES,
) -> Decision:
    """R-5/R-6: the job's next state after a started run ends with ``report``.

    docs/limits.md: the detail is cut to ``max_failure_detail_bytes`` (with a marker) and the
    message to ``max_message_bytes``, both UTF-8 safe (``StoreBounds`` supplies them).
    """
    message = truncate_utf8(report.message, max_message_bytes)
    detail = truncate_utf8(report.detail, max_failure_detail_bytes, TRUNCATION_MARKER)
    outcome = report.outcome
    if outcome is Outcome.SUCCEEDED:
        return Decision(Outcome.SUCCEEDED, JobState.SUCCEEDED, None)
    code = coerce_code(report.error_code, DEFAULT_CODES.get(outcome, "error"))
    if outcome is Outcome.CANCELLED:
        return Decision(outcome, JobState.CANCELLED, code, message=message, detail=detail)
    if job.cancel_requested:
        # the user asked to stop this job; however the run ended, it is not retried.
        return Decision(
            outcome, JobState.CANCELLED, code, message=message, detail=detail, job_error_code=CODE_CANCELLED
        )
    if outcome in RETRYABLE_OUTCOMES and report.explicit_retry_delay_ms is not None:
        if report.explicit_retry_delay_ms < 0:
            # a negative delay is the middleware's contract fault, not a retry.
            return Decision(
                Outcome.PERMANENT_FAILURE,
                JobState.FAILED,
                CODE_NEGATIVE_RETRY_DELAY,
                message=message,
                detail=detail,
            )
        delay = min(report.explicit_retry_delay_ms, job.retry_max_delay_ms)
        return _retry_or_fail(job, outcome, code, now_ms, delay, message, detail)
    if outcome in RETRYABLE_OUTCOMES:
        delay = retry_delay_ms(
            max(job.executions, 1), job.retry_initial_delay_ms, job.retry_max_delay_ms, rng
        )
        return _retry_or_fail(job, outcome, code, now_ms, delay, message, detail)
    return Decision(outcome, JobState.FAILED, code, message=message, detail=detail)


def decide_lease_expiry(job: JobView, now_ms: int, rng: RandomSource) -> Decision:
    """R-4/R-5: a lease lapsed. Before start it costs no execution, after start one.

    R-8: a job asked to cancel ends cancelled instead (its worker is gone).
    """
    if job.state is JobState.RESERVED:
        streak = job.unstarted_streak + 1
        code = DEFAULT_CODES[Outcome.UNSTARTED_ABANDONED]
        if job.cancel_requested:
            return Decision(
                Outcome.UNSTARTED_ABANDONED,
                JobState.CANCELLED,
                code,
                unstarted_streak=streak,
                job_error_code=CODE_CANCELLED,
            )
        if streak >= job.max_unstarted_abandonments:
            return Decision(
                Outcome.UNSTARTED_ABANDONED,
                JobState.FAILED,
                CODE_RESERVATION_ABANDONMENT_EXHAUSTED,
                unstarted_streak=streak,
            )
        delay = unstarted_delay_ms(streak, job.unstarted_initial_delay_ms, job.unstarted_max_delay_ms)
        return Decision(
            Outcome.UNSTARTED_ABANDONED,
            JobState.SCHEDULED,
            code,
            run_at_ms=now_ms + delay,
            retry_delay_ms=delay,
            unstarted_streak=streak,
        )
    return decide_result(job, Report(Outcome.ABANDONED), now_ms, 0, rng)


def decide_release(job: JobView, now_ms: int) -> Decision:
    """R-12: a worker gives back a claim it never started: no charge, claimable at once."""
    return Decision(
        Outcome.RELEASED, JobState.AVAILABLE, None, run_at_ms=now_ms, unstarted_streak=job.unstarted_streak
    )


class CancelAction(StrEnum):
    END_NOW = "end_now"
    """Not running: the job ends cancelled in this write."""
    REQUEST = "request"
    """Running: flag the job and ask its worker to stop the handler."""
    REFUSE = "refuse"
    """Terminal: nothing to cancel."""


@dataclass(frozen=True, slots=True)
class CancelDecision:
    action: CancelAction
    reason: str = ""
    """Why a cancel is refused, for the caller."""
    ends_attempt: bool = False
    """A reserved job's unstarted attempt ends too (outcome ``cancelled``, no charge)."""


def decide_cancel(job: JobView) -> CancelDecision:
    """R-8: what a user's cancel does in each state."""
    if job.state.terminal:
        return CancelDecision(
            CancelAction.REFUSE,
            reason=f"it is already {job.state.value}; only jobs that have not ended can be cancelled",
        )
    if job.state is JobState.RUNNING:
        return CancelDecision(CancelAction.REQUEST)
    return CancelDecision(CancelAction.END_NOW, ends_attempt=job.state is JobState.RESERVED)


@dataclass(frozen=True, slots=True)
class ManualRetryDecision:
    allowed: bool
    generation: int = 0
    """The new generation's number."""
    reason: str = ""


MANUALLY_RETRYABLE_STATES = frozenset({JobState.FAILED, JobState.CANCELLED})


def decide_manual_retry(job: JobView) -> ManualRetryDecision:
    """R-9: only a failed or cancelled job starts a new generation (fresh budgets:
    executions and the unstarted streak start at zero, earlier attempts are kept)."""
    if job.state not in MANUALLY_RETRYABLE_STATES:
        return ManualRetryDecision(
            False, reason=f"it is {job.state.value}; only failed or cancelled jobs can be retried"
        )
    return ManualRetryDecision(True, generation=job.generation + 1)


def _retry_or_fail(
    job: JobView, outcome: Outcome, code: str, now_ms: int, delay_ms: int, message: str, detail: str
) -> Decision:
    """R-1: retry while the budget lasts; the last allowed execution fails the job."""
    if job.executions >= job.max_executions:
        return Decision(outcome, JobState.FAILED, code, message=message, detail=detail)
    return Decision(
        outcome,
        JobState.SCHEDULED,
        code,
        run_at_ms=now_ms + delay_ms,
        retry_delay_ms=delay_ms,
        message=message,
        detail=detail,
    )
