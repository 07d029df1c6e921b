"""Operator actions on jobs: cancel (R-8), manual retry (R-9) and the audited reveal of
error text (R-22). Each is one transaction that carries out a domain decision with a
guarded write and records its audit event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from coordinator import audit
from coordinator.domain.access import Actor
from coordinator.domain.clock import Clock
from coordinator.domain.lifecycle import CancelAction, decide_cancel, decide_manual_retry
from coordinator.domain.states import CODE_CANCELLED, JobState, Outcome
from coordinator.errors import FailedPrecondition, NotFound, Unavailable
from coordinator.metrics import CoordinatorMetrics
from coordinator.store import AttemptRecord, JobRecord, Store, StoreError, WriteConflict
from coordinator.store.access import insert_audit_event
from coordinator.store.store import JobChange, WriteTx
from coordinator.validation import require_id

log = logging.getLogger(__name__)

T = TypeVar("T")
_WRITE_RETRIES = 3


@dataclass(frozen=True, slots=True)
class CancelPush:
    """A cancel to send over the stream of the worker running the attempt."""

    worker_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    job: JobRecord
    """The job after the write: cancelled, or running with ``cancel_requested``."""
    push: CancelPush | None = None


class ManagementService:
    def __init__(self, store: Store, clock: Clock, metrics: CoordinatorMetrics | None = None) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics

    def cancel(self, job_id: str, actor: Actor) -> Cancelled:
        """R-8: ends a job that is not running at once; flags a running one, whose worker
        the caller then tells (``push``). Raises FailedPrecondition for terminal jobs."""
        canonical = _require_id("id", job_id)
        cancelled = self._transaction(lambda tx: self._cancel(tx, canonical, actor))
        job = cancelled.job
        if self.metrics is not None and job.state is JobState.CANCELLED:
            # Ended here, outside any worker batch; a running job's end is counted there.
            self.metrics.completed(job.queue, job.wire_name, job.state)
        return cancelled

    def _cancel(self, tx: WriteTx, job_id: str, actor: Actor) -> Cancelled:
        job = _locked_job(tx, job_id)
        decision = decide_cancel(job.view())
        if decision.action is CancelAction.REFUSE:
            raise FailedPrecondition(f"job {job_id}: {decision.reason}", reason="WRONG_STATE")
        now = self.clock.now_ms()
        push = None
        attempt_id = job.current_attempt_id
        if decision.action is CancelAction.END_NOW:
            values = {
                "state": JobState.CANCELLED.value,
                "finished_at_ms": now,
                "last_error_code": CODE_CANCELLED,
                "current_attempt_id": None,
                "worker_id": None,
                "lease_expires_at_ms": None,
            }
            tx.apply([JobChange(job, values, reason=CODE_CANCELLED, attempt_id=attempt_id)], now)
            if decision.ends_attempt and attempt_id is not None:
                # The claim never started: its attempt ends cancelled, no execution charged.
                tx.finish_attempts([_cancelled_attempt(attempt_id, now)])
            detail = f"cancelled from {job.state.value}"
        else:
            if not job.cancel_requested:
                flag = JobChange(
                    job, {"cancel_requested": True}, reason="cancel_requested", attempt_id=attempt_id
                )
                tx.apply([flag], now)
            if job.worker_id is not None and attempt_id is not None:
                push = CancelPush(job.worker_id, attempt_id)
            detail = "cancel requested while running"
        insert_audit_event(tx.conn, audit.event(actor, audit.JOB_CANCEL, job_id, now, detail))
        return Cancelled(_locked_job(tx, job_id), push)

    def retry(self, job_id: str, actor: Actor) -> JobRecord:
        """R-9: a failed or cancelled job starts its next generation, available now, with
        fresh budgets; earlier attempts stay. Raises FailedPrecondition for other states."""
        canonical = _require_id("id", job_id)
        return self._transaction(lambda tx: self._retry(tx, canonical, actor))

    def _retry(self, tx: WriteTx, job_id: str, actor: Actor) -> JobRecord:
        job = _locked_job(tx, job_id)
        decision = decide_manual_retry(job.view())
        if not decision.allowed:
            raise FailedPrecondition(f"job {job_id}: {decision.reason}", reason="WRONG_STATE")
        now = self.clock.now_ms()
        values = {
            "state": JobState.AVAILABLE.value,
            "generation": decision.generation,
            "executions": 0,
            "unstarted_streak": 0,
            "run_at_ms": now,
            "finished_at_ms": None,
            "last_error_code": None,
            "output": None,
            "cancel_requested": False,
            "current_attempt_id": None,
            "worker_id": None,
            "lease_expires_at_ms": None,
        }
        tx.apply([JobChange(job, values, reason="manual_retry")], now)
        tx.notify_jobs_available()
        detail = f"{job.state.value}, generation {job.generation} -> {decision.generation}"
        insert_audit_event(tx.conn, audit.event(actor, audit.JOB_RETRY, job_id, now, detail))
        return _locked_job(tx, job_id)

    def reveal_error(self, attempt_id: str, actor: Actor) -> AttemptRecord:
        """R-22: the attempt with its message and full text; the audit event commits with
        the read, so no text leaves without its event."""
        canonical = _require_id("attempt_id", attempt_id)

        def reveal(tx: WriteTx) -> AttemptRecord:
            attempt = tx.attempts_by_ids([canonical]).get(canonical)
            if attempt is None:
                raise NotFound(
                    f"attempt {canonical} does not exist",
                    reason="ATTEMPT_NOT_FOUND",
                    metadata={"attempt_id": canonical},
                )
            now = self.clock.now_ms()
            detail = f"job {attempt.job_id} generation {attempt.generation}"
            insert_audit_event(
                tx.conn, audit.event(actor, audit.ATTEMPT_REVEAL_ERROR, canonical, now, detail)
            )
            return attempt

        return self._transaction(reveal)

    def _transaction(self, body: Callable[[WriteTx], T]) -> T:
        """Runs ``body`` in one write transaction, again on a write conflict (a worker
        batch changed the job between our read and write)."""
        for attempt in range(_WRITE_RETRIES):
            try:
                with self.store.write() as tx:
                    return body(tx)
            except WriteConflict:
                log.info("write conflict in a management action (try %d); retrying", attempt + 1)
            except StoreError as exc:
                raise Unavailable(str(exc)) from exc
        raise Unavailable("the job kept changing under the write; try again")


def _locked_job(tx: WriteTx, job_id: str) -> JobRecord:
    job = tx.jobs_by_ids([job_id]).get(job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist", reason="JOB_NOT_FOUND", metadata={"job_id": job_id})
    return job


def _cancelled_attempt(attempt_id: str, now: int) -> dict[str, object]:
    return {
        "id": attempt_id,
        "finished_at_ms": now,
        "outcome": Outcome.CANCELLED.value,
        "error_code": CODE_CANCELLED,
        "exception_type": None,
        "message": None,
        "detail": None,
        "retry_delay_ms": None,
        "job_state_after": JobState.CANCELLED.value,
        "reported": False,
    }


def _require_id(field: str, text: str) -> str:
    return require_id(field, text)  # INVALID_ID, as everywhere
