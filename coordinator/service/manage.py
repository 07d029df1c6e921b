"""Operator actions on jobs: cancel (R-8), manual retry (R-9) and the audited reveal of
error text (R-22). Each is one transaction that carries out a domain decision with a
guarded write and records its audit event.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain import changes
from coordinator.domain.access import Actor
from coordinator.domain.clock import Clock
from coordinator.domain.lifecycle import CancelAction, decide_cancel, decide_manual_retry
from coordinator.domain.records import AttemptEnd, AttemptRecord, JobRecord
from coordinator.domain.states import CODE_CANCELLED, JobState, Outcome
from coordinator.errors import FailedPrecondition, NotFound
from coordinator.service import audit
from coordinator.service.effects import CancelPush, Effects
from coordinator.service.writes import JobWrites
from coordinator.store import Store, Tx
from coordinator.validation import require_id


@dataclass(frozen=True, slots=True)
class Managed:
    """A job after an operator's action, and what the action changed for others."""

    job: JobRecord
    effects: Effects


class ManagementService:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def cancel(self, job_id: str, actor: Actor) -> Managed:
        """R-8: ends a job that is not running at once; flags a running one, whose worker
        is then told (``effects.cancel_pushes``). Raises FailedPrecondition for terminal jobs."""
        canonical = require_id("id", job_id)
        return self.store.transact(lambda tx: self._cancel(tx, canonical, actor), what="a cancel")

    def _cancel(self, tx: Tx, job_id: str, actor: Actor) -> Managed:
        job = _locked_job(tx, job_id)
        decision = decide_cancel(job.view())
        if decision.action is CancelAction.REFUSE:
            raise FailedPrecondition(f"job {job_id}: {decision.reason}", reason="WRONG_STATE")
        now = self.clock.now_ms()
        writes = JobWrites(tx, now)
        attempt_id = job.current_attempt_id
        if decision.action is CancelAction.END_NOW:
            attempt_end = None
            if decision.ends_attempt and attempt_id is not None:
                # The claim never started: its attempt ends cancelled, no execution charged.
                attempt_end = AttemptEnd(
                    attempt_id,
                    now,
                    Outcome.CANCELLED,
                    JobState.CANCELLED,
                    reported=False,
                    error_code=CODE_CANCELLED,
                )
            writes.end_job(
                job,
                changes.cancelled(job, now),
                reason=CODE_CANCELLED,
                attempt_id=attempt_id,
                attempt_end=attempt_end,
            )
            detail = f"cancelled from {job.state.value}"
        else:
            if not job.cancel_requested:
                writes.change(job, changes.cancel_requested(job), "cancel_requested", attempt_id)
            if job.worker_id is not None and attempt_id is not None:
                writes.effects.cancel_pushes.append(CancelPush(job.worker_id, attempt_id))
            detail = "cancel requested while running"
        writes.flush()
        tx.insert_audit_event(audit.event(actor, audit.JOB_CANCEL, job_id, now, detail))
        return Managed(_locked_job(tx, job_id), writes.effects)

    def retry(self, job_id: str, actor: Actor) -> Managed:
        """R-9: a failed or cancelled job starts its next generation, available now, with
        fresh budgets; earlier attempts stay. Raises FailedPrecondition for other states."""
        canonical = require_id("id", job_id)
        return self.store.transact(lambda tx: self._retry(tx, canonical, actor), what="a retry")

    def _retry(self, tx: Tx, job_id: str, actor: Actor) -> Managed:
        job = _locked_job(tx, job_id)
        decision = decide_manual_retry(job.view())
        if not decision.allowed:
            raise FailedPrecondition(f"job {job_id}: {decision.reason}", reason="WRONG_STATE")
        now = self.clock.now_ms()
        writes = JobWrites(tx, now)
        writes.change(job, changes.retried(job, decision.generation, now), "manual_retry", None)
        writes.effects.available_changed = True
        writes.flush()
        detail = f"{job.state.value}, generation {job.generation} -> {decision.generation}"
        tx.insert_audit_event(audit.event(actor, audit.JOB_RETRY, job_id, now, detail))
        return Managed(_locked_job(tx, job_id), writes.effects)

    def reveal_error(self, attempt_id: str, actor: Actor) -> AttemptRecord:
        """R-22: the attempt with its message and full text; the audit event commits with
        the read, so no text leaves without its event."""
        canonical = require_id("attempt_id", attempt_id)

        def reveal(tx: Tx) -> AttemptRecord:
            attempt = tx.attempts_by_ids([canonical]).get(canonical)
            if attempt is None:
                raise NotFound(
                    f"attempt {canonical} does not exist",
                    reason="ATTEMPT_NOT_FOUND",
                    metadata={"attempt_id": canonical},
                )
            now = self.clock.now_ms()
            detail = f"job {attempt.job_id} generation {attempt.generation}"
            tx.insert_audit_event(audit.event(actor, audit.ATTEMPT_REVEAL_ERROR, canonical, now, detail))
            return attempt

        return self.store.transact(reveal, what="a reveal")


def _locked_job(tx: Tx, job_id: str) -> JobRecord:
    job = tx.jobs_by_ids([job_id]).get(job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist", reason="JOB_NOT_FOUND", metadata={"job_id": job_id})
    return job
