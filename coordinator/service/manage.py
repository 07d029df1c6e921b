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
from coordinator.domain.states import CODE_CANCELLED, CODE_PARENT_FAILED, JobState, Outcome
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
    reopened: tuple[str, ...] = ()
    """With a retry that includes dependents: the descendants re-opened (R-15)."""


class ManagementService:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def cancel(self, job_id: str, actor: Actor) -> Managed:
        """R-8: ends a job that is not running at once; flags a running one, whose worker
        is then told (``effects.cancel_pushes``). Raises FailedPrecondition for terminal jobs."""
        canonical = require_id("id", job_id)
        return self.store.transact(lambda tx: self.cancel_in(tx, canonical, actor), what="a cancel")

    def cancel_in(self, tx: Tx, job_id: str, actor: Actor, *, bulk: str | None = None) -> Managed:
        """``cancel`` inside the caller's transaction (a bulk cancel's batch names its
        filter as ``bulk``, for the audit event). A refusal raises before any write."""
        job = _locked_job(tx, job_id)
        decision = decide_cancel(job)
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
                writes.effects.cancel_pushes.append(_cancel_push(tx, job.worker_id, attempt_id))
            detail = "cancel requested while running"
        if bulk is not None:
            detail += f" (bulk: {bulk})"
        writes.flush()
        tx.insert_audit_event(audit.event(actor, audit.JOB_CANCEL, job_id, now, detail))
        return Managed(_locked_job(tx, job_id), writes.effects)

    def retry(self, job_id: str, actor: Actor, *, include_dependents: bool = False) -> Managed:
        """R-9: a failed or cancelled job starts its next generation with fresh budgets,
        available now — or waiting, when parents have still to succeed (R-15); earlier
        attempts stay. With ``include_dependents``, the descendants that failed
        ``parent_failed`` because of it wait again too. Raises FailedPrecondition for
        other states, and when a parent of the job failed (retry that parent instead)."""
        canonical = require_id("id", job_id)
        return self.store.transact(
            lambda tx: self.retry_in(tx, canonical, actor, include_dependents), what="a retry"
        )

    def retry_in(
        self, tx: Tx, job_id: str, actor: Actor, include_dependents: bool, *, bulk: str | None = None
    ) -> Managed:
        """``retry`` inside the caller's transaction (see ``cancel_in``). A refusal raises
        before any write."""
        job = _locked_job(tx, job_id)
        decision = decide_manual_retry(job)
        if not decision.allowed:
            raise FailedPrecondition(f"job {job_id}: {decision.reason}", reason="WRONG_STATE")
        now = self.clock.now_ms()
        writes = JobWrites(tx, now)
        pending = tx.unsatisfied_parents([job.id]).get(job.id, [])
        failed = _failed_parent(writes, tx, pending)
        if failed is not None:
            raise FailedPrecondition(
                f"job {job_id}: its parent {failed} did not succeed; retry the parent with its "
                "dependents instead",
                reason="PARENT_NOT_SUCCEEDED",
                metadata={"job_id": job_id, "parent_id": failed},
            )
        after = changes.retried(job, decision.generation, now, waiting=bool(pending))
        writes.change(job, after, "manual_retry", None)
        writes.effects.available_changed = after.state is JobState.AVAILABLE
        reopened = _reopen_dependents(writes, tx, job.id, now) if include_dependents else []
        writes.flush()
        detail = f"{job.state.value}, generation {job.generation} -> {decision.generation}"
        if include_dependents:
            detail += f", {len(reopened)} dependents re-opened"
        if bulk is not None:
            detail += f" (bulk: {bulk})"
        tx.insert_audit_event(audit.event(actor, audit.JOB_RETRY, job_id, now, detail))
        return Managed(_locked_job(tx, job_id), writes.effects, tuple(reopened))

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


def _failed_parent(writes: JobWrites, tx: Tx, parent_ids: list[str]) -> str | None:
    """The first of ``parent_ids`` that failed, was cancelled or no longer exists, as this
    transaction leaves them (a parent re-opened just now is pending again)."""
    found = tx.jobs_by_ids(parent_ids)
    for parent_id in parent_ids:
        parent = found.get(parent_id)
        if parent is None or writes.fresh(parent).state in (JobState.FAILED, JobState.CANCELLED):
            return parent_id
    return None


def _reopen_dependents(writes: JobWrites, tx: Tx, root_id: str, now: int) -> list[str]:
    """R-15: the descendants of ``root_id`` that ended ``parent_failed`` wait again, each
    in its next generation — unless another of its parents failed and stays failed."""
    reopened: list[str] = []
    frontier = [root_id]
    while frontier:
        for stored in tx.children_failed_by_parent(frontier.pop()):
            child = writes.fresh(stored)
            if child.state is not JobState.FAILED or child.last_error_code != CODE_PARENT_FAILED:
                continue  # re-opened already, through another parent
            pending = tx.unsatisfied_parents([child.id]).get(child.id, [])
            if _failed_parent(writes, tx, pending) is not None:
                continue
            writes.change(
                child, changes.retried(child, child.generation + 1, now, waiting=True), "manual_retry", None
            )
            reopened.append(child.id)
            frontier.append(child.id)
    return reopened


def _cancel_push(tx: Tx, worker_id: str, attempt_id: str) -> CancelPush:
    """The push to the streams holding the attempt: they claimed it with its token."""
    attempt = tx.attempts_by_ids([attempt_id]).get(attempt_id)
    return CancelPush(worker_id, attempt_id, attempt.token_id if attempt is not None else None)


def _locked_job(tx: Tx, job_id: str) -> JobRecord:
    job = tx.jobs_by_ids([job_id]).get(job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist", reason="JOB_NOT_FOUND", metadata={"job_id": job_id})
    return job
