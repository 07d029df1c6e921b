"""Bulk cancel and retry by filter (``AdminService.BulkCancelJobs``/``BulkRetryJobs``),
and the dashboard's bulk purge of the finished jobs a filter matches.

A bulk operation is a run of bounded batches, each one transaction: select the next
jobs of the filter (in id order, locked, only those created when the operation began),
then cancel or retry each exactly as the single operation does (``ManagementService``:
the same decision, guarded write and audit event per job). A job the single call would
refuse is skipped with that call's reason and message; nothing else about it changes.
The facade runs the batches and hands each one's effects on after its commit.

A bulk purge runs the same batches over terminal jobs only and removes them as retention
does (``Tx.purge_selected``); like ``runwick purge`` it is recorded once in the audit log
(``jobs.purge``, with the filter), in the transaction of its first batch, so no job is
removed before the event commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.domain.access import Actor
from coordinator.domain.states import TERMINAL_STATES, JobState
from coordinator.errors import CoordinatorError, InvalidArgument
from coordinator.service import audit
from coordinator.service.effects import Effects
from coordinator.service.manage import ManagementService
from coordinator.store import Tx
from coordinator.validation import check_name

MAX_SKIPPED_LISTED = 100
"""How many skipped jobs an answer names (it counts them all)."""

CANCELLABLE = (JobState.SCHEDULED, JobState.WAITING, JobState.AVAILABLE, JobState.RESERVED, JobState.RUNNING)
RETRYABLE = (JobState.FAILED, JobState.CANCELLED)
PURGEABLE = tuple(state for state in JobState if state in TERMINAL_STATES)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs a bulk operation acts on; every field given must match."""

    queue: str | None = None
    state: JobState | None = None
    wire_name: str | None = None

    @property
    def empty(self) -> bool:
        return self.queue is None and self.state is None and self.wire_name is None

    def describe(self) -> str:
        """The filter as an audit event's detail says it."""
        parts = [
            f"{name} {value}"
            for name, value in (
                ("queue", self.queue),
                ("state", self.state.value if self.state else None),
                ("wire name", self.wire_name),
            )
            if value is not None
        ]
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class SkippedJob:
    job_id: str
    reason: str
    message: str


@dataclass(slots=True)
class BulkBatch:
    """What one batch did."""

    selected: int
    last_id: str | None
    """The last job selected; None when the batch selected none (the operation is over)."""
    done: int = 0
    """Cancelled at once, or retried."""
    requested: int = 0
    """Cancel only: running jobs whose workers were asked to stop."""
    reopened: list[str] = field(default_factory=list)
    """Retry with dependents: the descendants re-opened."""
    skipped: list[SkippedJob] = field(default_factory=list)
    effects: list[Effects] = field(default_factory=list)


@dataclass(slots=True)
class BulkOutcome:
    """A whole bulk operation: the batches' counts added up."""

    done: int = 0
    requested: int = 0
    reopened_ids: set[str] = field(default_factory=set)
    """Descendants re-opened so far: a later batch that selects one leaves it be."""
    skipped: int = 0
    skipped_jobs: list[SkippedJob] = field(default_factory=list)

    @property
    def reopened(self) -> int:
        return len(self.reopened_ids)

    def add(self, batch: BulkBatch) -> None:
        self.done += batch.done
        self.requested += batch.requested
        self.reopened_ids.update(batch.reopened)
        self.skipped += len(batch.skipped)
        room = MAX_SKIPPED_LISTED - len(self.skipped_jobs)
        self.skipped_jobs.extend(batch.skipped[: max(room, 0)])


def check_filter(
    job_filter: JobFilter, allowed: tuple[JobState, ...], verb: str, max_wire_name_length: int
) -> tuple[JobState, ...]:
    """The states a bulk operation selects; InvalidArgument for an empty filter, a bad
    name, or a state the operation does not apply to."""
    if job_filter.empty:
        raise InvalidArgument(
            "filter",
            f"give at least one of queue, state or wire_name: a bulk {verb} of every job is refused",
            reason="FILTER_REQUIRED",
        )
    if job_filter.queue is not None:
        check_name("filter.queue", job_filter.queue)
    if job_filter.wire_name is not None:
        check_name("filter.wire_name", job_filter.wire_name, max_length=max_wire_name_length)
    if job_filter.state is None:
        return allowed
    if job_filter.state not in allowed:
        names = ", ".join(state.value for state in allowed)
        raise InvalidArgument(
            "filter.state",
            f"a bulk {verb} applies to {names} jobs, not {job_filter.state.value}",
            reason="WRONG_STATE",
        )
    return (job_filter.state,)


class BulkService:
    """Bulk cancel and retry batches over ``ManagementService``'s per-job operations."""

    def __init__(self, manage: ManagementService) -> None:
        self.manage = manage
        self.store = manage.store

    def cancel_batch(
        self,
        job_filter: JobFilter,
        states: tuple[JobState, ...],
        created_by_ms: int,
        after_id: str | None,
        actor: Actor,
    ) -> BulkBatch:
        """One transaction: R-8 for each of the next jobs of the filter."""

        def body(tx: Tx) -> BulkBatch:
            batch = self._select(tx, job_filter, states, created_by_ms, after_id)
            for job_id in batch.ids:
                try:
                    managed = self.manage.cancel_in(tx, job_id, actor, bulk=job_filter.describe())
                except CoordinatorError as exc:
                    batch.result.skipped.append(_skipped(job_id, exc))
                    continue
                if managed.job.state is JobState.CANCELLED:
                    batch.result.done += 1
                else:
                    batch.result.requested += 1
                batch.result.effects.append(managed.effects)
            return batch.result

        return self.store.transact(body, what="a bulk cancel")

    def retry_batch(
        self,
        job_filter: JobFilter,
        states: tuple[JobState, ...],
        created_by_ms: int,
        after_id: str | None,
        actor: Actor,
        *,
        include_dependents: bool,
        reopened: frozenset[str] = frozenset(),
    ) -> BulkBatch:
        """One transaction: R-9 for each of the next jobs of the filter. Jobs this
        operation already re-opened as dependents (``reopened``, and those re-opened in
        this batch) were retried with their parent: they are neither retried again nor
        reported skipped."""

        def body(tx: Tx) -> BulkBatch:
            batch = self._select(tx, job_filter, states, created_by_ms, after_id)
            for job_id in batch.ids:
                if job_id in reopened or job_id in batch.result.reopened:
                    continue
                try:
                    managed = self.manage.retry_in(
                        tx, job_id, actor, include_dependents, bulk=job_filter.describe()
                    )
                except CoordinatorError as exc:
                    batch.result.skipped.append(_skipped(job_id, exc))
                    continue
                batch.result.done += 1
                batch.result.reopened.extend(managed.reopened)
                batch.result.effects.append(managed.effects)
            return batch.result

        return self.store.transact(body, what="a bulk retry")

    def purge_batch(
        self,
        job_filter: JobFilter,
        states: tuple[JobState, ...],
        created_by_ms: int,
        after_id: str | None,
        actor: Actor,
    ) -> BulkBatch:
        """One transaction: removes the next terminal jobs of the filter; the first
        batch (``after_id`` None) records the purge in the audit log."""

        def body(tx: Tx) -> BulkBatch:
            if after_id is None:
                target = job_filter.state.value if job_filter.state is not None else "finished"
                detail = f"bulk: {job_filter.describe()}"
                now = self.manage.clock.now_ms()
                tx.insert_audit_event(audit.event(actor, audit.JOBS_PURGE, target, now, detail))
            batch = self._select(tx, job_filter, states, created_by_ms, after_id)
            batch.result.done = tx.purge_selected(batch.ids, states)
            return batch.result

        return self.store.transact(body, what="a bulk purge")

    def _select(
        self,
        tx: Tx,
        job_filter: JobFilter,
        states: tuple[JobState, ...],
        created_by_ms: int,
        after_id: str | None,
    ) -> _Selection:
        jobs = tx.selected_jobs(
            states=states,
            queue=job_filter.queue,
            wire_name=job_filter.wire_name,
            created_by_ms=created_by_ms,
            after_id=after_id,
            limit=self.store.bounds.max_page_size,
        )
        ids = [job.id for job in jobs]
        return _Selection(ids, BulkBatch(selected=len(ids), last_id=ids[-1] if ids else None))


@dataclass(slots=True)
class _Selection:
    ids: list[str]
    result: BulkBatch


def _skipped(job_id: str, exc: CoordinatorError) -> SkippedJob:
    return SkippedJob(job_id, exc.reason or type(exc).__name__, str(exc))
