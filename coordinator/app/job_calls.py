"""The facade's calls on jobs: enqueue (with the claims of waiting workers), reads,
waits, cancel and retry (single and bulk), errors revealed, purges (R-19)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from coordinator.app.core import CoordinatorCore
from coordinator.domain.access import Actor
from coordinator.domain.flow import WaitingReason
from coordinator.domain.graph import GRAPH_LIMIT, Neighbourhood
from coordinator.domain.progress import Progress
from coordinator.domain.records import AttemptRecord, Enqueued, JobRecord, NewJobSpec, Relatives
from coordinator.domain.search import JobSearch, SearchPage
from coordinator.domain.states import JobState
from coordinator.errors import InvalidArgument
from coordinator.scheduler.retention import purge_all
from coordinator.service.bulk import (
    CANCELLABLE,
    PURGEABLE,
    RETRYABLE,
    BulkBatch,
    BulkOutcome,
    JobFilter,
    check_filter,
)
from coordinator.service.retention import check_purge
from coordinator.service.search import JobSearchService
from coordinator.service.work import CancelItem, EnqueueItem, WorkBatch
from coordinator.validation import require_id

DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 3_600_000


class JobCalls(CoordinatorCore):
    """Jobs: each call with its follow-ups."""

    async def enqueue(
        self, specs: Sequence[NewJobSpec], reachable: frozenset[str] | None = None
    ) -> list[Enqueued]:
        """Enqueues all of ``specs`` or none (see ``JobsService.enqueue``; ``reachable``:
        the caller's queue restriction, None: any). The call is an item of the writer's
        next batch (``Dispatcher.enqueue``): committed together with the other calls and
        worker messages pending then, under its own savepoint, and answered only once
        committed. The same transaction claims the new jobs for this replica's waiting
        workers, handed out once it has committed."""
        now = self.clock.now_ms()
        due = {spec.queue for spec in specs if spec.run_at_ms is None or spec.run_at_ms <= now}
        item = EnqueueItem(list(specs), reachable)
        if self.dispatcher.takes_calls:
            outcome = await self.dispatcher.enqueue(item, due)
        else:  # no loop to write it: not started, or stopping (it may have written its last batch)
            answers = await self.executors.write(self.ops.process, WorkBatch(enqueues=[item]))
            outcome = answers.enqueued[0]
        if isinstance(outcome, Exception):
            raise outcome
        self._after_enqueue(specs, outcome, now)
        return outcome

    def _after_enqueue(self, specs: Sequence[NewJobSpec], enqueued: list[Enqueued], now: int) -> None:
        """An enqueue's follow-ups once it committed: metrics, the background loops and the
        scaler's waiters woken, and a timer for each job due later. (Jobs due now were
        claimed for the waiting workers in the enqueue's own batch.)"""
        self._wake_maintenance(leases=False, scheduled=any(spec.run_at_ms is not None for spec in specs))
        self.arrivals.signal()
        created = [(spec, item) for spec, item in zip(specs, enqueued, strict=True) if not item.existing]
        self.metrics.enqueued_many((spec.queue, spec.wire_name) for spec, _ in created)
        for spec, item in created:
            if item.state.terminal:  # under a parent that failed already
                self.metrics.completed(spec.queue, spec.wire_name, item.state)
            elif spec.run_at_ms is not None and spec.run_at_ms > now:
                self.dispatcher.jobs_available(spec.run_at_ms, spec.queue)

    async def get_job(self, job_id: str) -> JobRecord:
        return await self.executors.read(self.jobs.get_job, job_id)

    async def list_jobs(
        self,
        *,
        queue: str | None,
        state: JobState | None,
        wire_name: str | None,
        page_size: int,
        page_token: str,
    ) -> tuple[list[JobRecord], str]:
        return await self.executors.read(
            self.jobs.list_jobs,
            queue=queue,
            state=state,
            wire_name=wire_name,
            page_size=page_size,
            page_token=page_token,
        )

    async def relatives(self, job: JobRecord) -> Relatives:
        """The parents and children (R-15) of a job just read (``get_job``, ``wait_job``)."""
        return await self.executors.read(self.jobs.relatives, job)

    async def current_progress(self, job: JobRecord) -> Progress | None:
        return await self.executors.read(self.jobs.current_progress, job)

    async def waiting_reason(self, job: JobRecord) -> WaitingReason | None:
        """Which queue control holds a claimable ``job`` back, if any."""
        return await self.executors.read(self.jobs.waiting_reason, job)

    async def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        return await self.executors.read(self.jobs.list_attempts, job_id)

    async def wait_job(self, job_id: str, timeout_ms: int | None) -> JobRecord:
        """The job once it is terminal, or as it is when ``timeout_ms`` (default 30 s, at
        most 1 h) has passed. Woken by this replica's writes; a periodic re-read covers
        the others."""
        timeout_ms = DEFAULT_WAIT_MS if timeout_ms is None else timeout_ms
        if not 0 <= timeout_ms <= MAX_WAIT_MS:
            raise InvalidArgument(
                "timeout", f"must be 0 to 1 h, got {timeout_ms} ms", reason="INVALID_DURATION"
            )
        # Watched before the first read: an end committed between that read and the
        # registration would never be heard, and the wait would last the whole timeout.
        canonical = require_id("id", job_id)
        event = self.watch.register(canonical)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        try:
            job = await self.get_job(canonical)
            while not job.state.terminal and loop.time() < deadline:
                remaining = min(deadline - loop.time(), self.config.idle_recheck_interval_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), max(remaining, 0))
                job = await self.get_job(job.id)
                if event.is_set():
                    self.watch.unregister(job.id, event)
                    event = self.watch.register(job.id)
        finally:
            self.watch.unregister(canonical, event)
        return job

    async def cancel(self, job_id: str, actor: Actor) -> JobRecord:
        """R-8 (audited): the job after the write, cancelled or running with the request.
        Like an enqueue, the call is an item of the writer's next batch
        (``Dispatcher.cancel``), under its own savepoint, and answered only once that batch
        committed; a refused cancel fails alone. Its ID is checked before it is queued."""
        item = CancelItem(require_id("id", job_id), actor)
        if self.dispatcher.takes_calls:
            outcome = await self.dispatcher.cancel(item)
        else:  # no loop to write it: not started, or stopping (it may have written its last batch)
            answers = await self.executors.write(self.ops.process, WorkBatch(cancels=[item]))
            outcome = answers.cancelled[0]
        if isinstance(outcome, Exception):
            raise outcome
        self._absorb(outcome.effects)
        return outcome.job

    async def retry(
        self, job_id: str, actor: Actor, *, include_dependents: bool = False
    ) -> tuple[JobRecord, tuple[str, ...]]:
        """R-9 (audited): the job's next generation, available now or waiting for its
        parents, and (with ``include_dependents``) the descendants re-opened (R-15)."""
        managed = await self.executors.write(
            self.manage.retry, job_id, actor, include_dependents=include_dependents
        )
        self._absorb(managed.effects)
        return managed.job, managed.reopened

    async def bulk_cancel(self, job_filter: JobFilter, actor: Actor) -> BulkOutcome:
        """R-8 for every job the filter selects that has not ended and existed when the
        call began, in batches of at most ``max_page_size`` jobs, one transaction each;
        each job is audited as a single cancel is. Raises InvalidArgument for an empty
        filter or a terminal ``state``, before anything changes."""
        states = check_filter(job_filter, CANCELLABLE, "cancel", self.bounds.max_wire_name_length)
        return await self._bulk(
            lambda after_id, by_ms: self.bulk.cancel_batch(job_filter, states, by_ms, after_id, actor)
        )

    async def bulk_purge(self, job_filter: JobFilter, actor: Actor) -> BulkOutcome:
        """Removes every succeeded, failed or cancelled job the filter selects that
        existed when the call began, as retention removes them (the dashboard's bulk
        purge; it needs ``admin``, as ``PurgeJobs`` does), in batches as ``bulk_cancel``
        runs them; audited once (``jobs.purge`` with the filter) before any job goes.
        Raises InvalidArgument for an empty filter or a state that has not ended."""
        states = check_filter(job_filter, PURGEABLE, "purge", self.bounds.max_wire_name_length)
        return await self._bulk(
            lambda after_id, by_ms: self.bulk.purge_batch(job_filter, states, by_ms, after_id, actor)
        )

    async def bulk_retry(
        self, job_filter: JobFilter, actor: Actor, *, include_dependents: bool = False
    ) -> BulkOutcome:
        """R-9 for every failed or cancelled job the filter selects, as ``bulk_cancel``
        runs its batches. A job a single retry would refuse is skipped with its reason."""
        states = check_filter(job_filter, RETRYABLE, "retry", self.bounds.max_wire_name_length)
        outcome = BulkOutcome()
        return await self._bulk(
            lambda after_id, by_ms: self.bulk.retry_batch(
                job_filter,
                states,
                by_ms,
                after_id,
                actor,
                include_dependents=include_dependents,
                reopened=frozenset(outcome.reopened_ids),
            ),
            outcome,
        )

    async def _bulk(
        self, batch: Callable[[str | None, int], BulkBatch], outcome: BulkOutcome | None = None
    ) -> BulkOutcome:
        outcome = outcome or BulkOutcome()
        created_by_ms = self.clock.now_ms()
        after_id: str | None = None
        while True:
            done = await self.executors.write(batch, after_id, created_by_ms)
            for effects in done.effects:
                self._absorb(effects)
            outcome.add(done)
            if done.last_id is None:
                return outcome
            after_id = done.last_id

    async def reveal_error(self, attempt_id: str, actor: Actor) -> AttemptRecord:
        """R-22 (audited): the attempt with its exception message and full text."""
        return await self.executors.write(self.manage.reveal_error, attempt_id, actor)

    # -- retention (R-19) ---------------------------------------------------------------

    async def run_retention(self) -> dict[JobState, int]:
        """One retention pass now: how many jobs of each state it purged (tests with a
        fake clock call it after advancing the clock)."""
        return await self.retention.run_once()

    async def purge_jobs(self, state: JobState | None, older_than_ms: int | None, actor: Actor) -> int:
        """Purges now (audited, ``jobs.purge``) the ``state`` jobs that finished more than
        ``older_than_ms`` ago, in batches as retention does; returns how many. Raises
        InvalidArgument for a state that is not terminal or a negative age."""
        state, older_than_ms = check_purge(state, older_than_ms)
        cutoff = self.retention_service.cutoff_ms(older_than_ms)
        return await purge_all(self.retention_service, self.executors, state, cutoff, actor=actor)

    # -- the dashboard's search, bulk preview and job graph -------------------------------

    async def search_jobs(self, search: JobSearch, *, page_size: int, cursor: str) -> SearchPage:
        """A page of a jobs search, bounded as ``domain.search`` says; InvalidArgument for
        a bad field or cursor, before any read."""
        service = JobSearchService(self.store, self.config.dashboard_limits)
        return await self.executors.read(service.search, search, page_size=page_size, cursor=cursor)

    async def bulk_count(self, job_filter: JobFilter, verb: str) -> tuple[int, bool]:
        """How many jobs the bulk ``verb`` (cancel, retry or purge) of ``job_filter``
        would act on now, and whether the count was capped; their refusals, unread."""
        service = JobSearchService(self.store, self.config.dashboard_limits)
        allowed = {"cancel": CANCELLABLE, "retry": RETRYABLE, "purge": PURGEABLE}[verb]
        return await self.executors.read(service.bulk_count, job_filter, allowed, verb)

    async def job_neighbourhood(self, job: JobRecord, limit: int = GRAPH_LIMIT) -> Neighbourhood:
        """A job just read's parents and children with their states, ``limit`` each way."""
        return await self.executors.read(self.store.neighbourhood, job.id, limit)
