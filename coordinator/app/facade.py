"""``Coordinator``: the store, executors, dispatcher, services and background loops of
one coordinator process, and every operation transports may call, each with its
follow-ups (waking the dispatcher, pushing a cancel, closing a revoked token's streams,
waking waiters, counting metrics) done here, once, whatever the transport.

``await Coordinator.open(config)`` builds it; ``start()`` runs the dispatcher and the
loops; ``drain()``, ``stop_background()`` and ``close()`` take it down in that order
(``coordinator.process`` does so around its servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from coordinator.app.arrivals import Arrivals
from coordinator.app.watch import TerminalWatch
from coordinator.app.workers import ConnectedWorker
from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerHello, WorkerSession
from coordinator.domain.access import Actor, Principal
from coordinator.domain.activity import HOUR_MS, Throughput
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.clock import Clock, OffsetClock, SystemClock
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.progress import Progress
from coordinator.domain.records import (
    AttemptRecord,
    AuditEvent,
    Enqueued,
    JobRecord,
    LeaseHolder,
    NewJobSpec,
    QueueRecord,
    QueueStats,
    Relatives,
    TokenRecord,
    WorkerStream,
)
from coordinator.domain.schedules import NewScheduleSpec, ScheduleView
from coordinator.domain.states import JobState
from coordinator.errors import InvalidArgument, Unavailable
from coordinator.metrics import CoordinatorMetrics
from coordinator.scheduler.clock import DatabaseClock, database_offset_ms
from coordinator.scheduler.counts import QueueCountFolding
from coordinator.scheduler.cron import ScheduleTicks
from coordinator.scheduler.due import due_promotion
from coordinator.scheduler.leases import lease_expiry
from coordinator.scheduler.loop import Cadence
from coordinator.scheduler.retention import Retention, purge_all
from coordinator.scheduler.revocations import RevokedTokenStreams
from coordinator.scheduler.stats import QueueStatistics
from coordinator.service import waiting
from coordinator.service.activity import ActivityService
from coordinator.service.audit import AuditLog
from coordinator.service.batch import WorkerOps
from coordinator.service.bulk import (
    CANCELLABLE,
    RETRYABLE,
    BulkBatch,
    BulkOutcome,
    BulkService,
    JobFilter,
    check_filter,
)
from coordinator.service.dashboard import DashboardSessions
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors
from coordinator.service.jobs import JobsService
from coordinator.service.manage import ManagementService
from coordinator.service.queues import QueueService
from coordinator.service.retention import RetentionService, check_purge
from coordinator.service.schedules import Fired, SchedulesService
from coordinator.service.tokens import NewToken, TokenService, check_bootstrap_token
from coordinator.service.work import BatchAnswers
from coordinator.store import DatabaseTimeouts, Store
from coordinator.store.notify import listen_for_jobs
from coordinator.validation import require_id

log = logging.getLogger(__name__)

DEFAULT_WAIT_MS = 30_000
POSTGRES_BATCHES_IN_FLIGHT = 2
"""Worker batches written at once on PostgreSQL: a batch is a dozen round trips, so the
next one starts while the last commits; the writer's other threads (see
``service.executors``) stay free for enqueues and maintenance."""
MAX_WAIT_MS = 3_600_000
ReadinessListener = Callable[[bool], Awaitable[None]]


class Coordinator:
    """One coordinator process's core. Build it with ``await Coordinator.open(config)``."""

    def __init__(
        self,
        config: CoordinatorConfig,
        store: Store,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.bootstrap_token: str | None = None
        """The admin token created on this first start (show it once), else None."""
        self.metrics = CoordinatorMetrics(
            max_label_values=config.metrics_max_label_values, max_series=config.metrics_max_series
        )
        """The registry behind ``/metrics`` (also readable in-process)."""
        store.on_transaction = self.metrics.transaction
        self.executors = Executors(postgres=store.postgres)
        self.watch = TerminalWatch()
        self.arrivals = Arrivals()
        """Signalled when jobs may have become claimable (scaler streams wait on it)."""
        self.tokens = TokenService(store, clock, config.auth_cache_ttl_s)
        self.dashboard_sessions = DashboardSessions(
            store, clock, config.dashboard_session_ttl_s, config.dashboard_limits
        )
        self.jobs = JobsService(store, clock, config, rng)
        self.ops = WorkerOps(store, clock, config, rng)
        self.manage = ManagementService(store, clock)
        self.bulk = BulkService(self.manage)
        self.audit_log = AuditLog(store, config)
        self.queues = QueueService(store, clock, config)
        self.activity = ActivityService(store, clock)
        self.count_folding = QueueCountFolding(
            self.queues, self.executors, Cadence(config.queue_count_fold_interval_s, config.idle_interval_s)
        )
        self.schedules = SchedulesService(store, clock, config, self.jobs)
        self.dispatcher = Dispatcher(
            self.ops.process,
            config,
            clock,
            self.executors,
            self._absorb,
            on_sessions_changed=lambda sessions: self.metrics.workers(s.queues for s in sessions),
            batches_in_flight=POSTGRES_BATCHES_IN_FLIGHT if self.store.postgres else 1,
        )
        interval, idle = config.maintenance_interval_s, config.idle_interval_s
        self.lease_expiry = lease_expiry(self.ops, self.executors, self._absorb, Cadence(interval, idle))
        self.due_promotion = due_promotion(self.ops, self.executors, self._absorb, Cadence(interval, idle))
        self.queue_statistics = QueueStatistics(
            store,
            clock,
            config.health_check_interval_s,
            config.health_check_timeout_s,
            self.metrics.queue_stats,
            self._database_checked,
            on_held_back=self.metrics.held_back,
        )
        self.schedule_ticks = ScheduleTicks(
            self.schedules, self.executors, self._schedule_fired, config.schedule_interval_s
        )
        self.revoked_streams = RevokedTokenStreams(
            store,
            self.executors,
            self.dispatcher.open_token_ids,
            self._token_revoked_elsewhere,
            config.auth_cache_ttl_s,
        )
        self.retention_service = RetentionService(store, clock)
        self.retention = Retention(
            self.retention_service, self.executors, config.retention_ages_ms(), config.retention_interval_s
        )
        self._readiness_listeners: list[ReadinessListener] = []
        self.replica = f"{socket.gethostname()}-{os.getpid()}"
        """This process among the replicas: host name and process ID (``list_workers``)."""
        self._connected_at_ms: dict[WorkerSession, int] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._dispatch_task: asyncio.Task[None] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        """PostgreSQL LISTEN: it has no stop event of its own, so it is cancelled."""

    @classmethod
    async def open(
        cls,
        config: CoordinatorConfig,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        rng: random.Random | None = None,
    ) -> Coordinator:
        """Opens the store (creating SQLite on first start) and, with authentication on,
        creates the bootstrap admin token when there is no token yet."""
        config.retention_ages_ms()  # a bad retention setting fails before the store opens
        if config.bootstrap_token is not None:
            check_bootstrap_token(config.bootstrap_token)  # and so does a malformed token
        if store is None:
            timeouts = DatabaseTimeouts(
                pg_idle_in_transaction_timeout_ms=config.pg_idle_in_transaction_timeout_ms,
                pg_lock_timeout_ms=config.pg_lock_timeout_ms,
                pg_statement_timeout_ms=config.pg_statement_timeout_ms,
                sqlite_busy_timeout_ms=config.sqlite_busy_timeout_ms,
            )
            store = await asyncio.to_thread(
                Store.open, config.database_url, bounds=config.bounds, timeouts=timeouts
            )
        elif store.bounds != config.bounds:
            raise ValueError(
                "the store's bounds differ from config.bounds; open it with bounds=config.bounds"
            )
        try:
            if clock is None:
                # with PostgreSQL every replica reads time as the database tells it.
                clock = (
                    OffsetClock(await asyncio.to_thread(database_offset_ms, store))
                    if store.postgres
                    else SystemClock()
                )
        except BaseException:
            store.close()
            raise
        app = cls(config, store, clock, rng or random.Random())
        if config.auth_enabled:
            try:
                supplied = config.bootstrap_token
                made = await app.executors.write(
                    app.tokens.bootstrap, supplied, generate=config.generate_bootstrap_token
                )
                # The operator knows a token they supplied: only a generated one is shown.
                app.bootstrap_token = made if supplied is None else None
            except BaseException:
                app.close()
                raise
        return app

    @property
    def bounds(self) -> StoreBounds:
        return self.store.bounds

    # -- running ------------------------------------------------------------------------

    def start(self) -> None:
        """Runs the dispatcher and the background loops on the running event loop."""
        stop = self._stop
        self._dispatch_task = asyncio.create_task(self.dispatcher.run(), name="runwick-dispatch")
        loops: list[tuple[str, Callable[[asyncio.Event], Coroutine[Any, Any, None]]]] = [
            ("leases", self.lease_expiry.run),
            ("due", self.due_promotion.run),
            ("stats", self.queue_statistics.run),
            ("counts", self.count_folding.run),
            ("schedules", self.schedule_ticks.run),
        ]
        if self.config.auth_enabled:
            loops.append(("revocations", self.revoked_streams.run))
        if self.retention.ages:
            loops.append(("retention", self.retention.run))
        if isinstance(self.clock, OffsetClock):
            refresh = DatabaseClock(
                self.store, self.clock, self.executors, self.config.clock_refresh_interval_s
            )
            loops.append(("clock", refresh.run))
        self._tasks = [asyncio.create_task(run(stop), name=f"runwick-{name}") for name, run in loops]
        if self.store.postgres:
            listen = listen_for_jobs(
                self.store.url, self._heard_of_jobs, self.dispatcher.hears_all, own_origin=self.store.origin
            )
            self._listen_task = asyncio.create_task(listen, name="runwick-listen")
        else:
            self.dispatcher.hears_all(True)  # SQLite: this process makes every write

    def on_readiness(self, listener: ReadinessListener) -> None:
        """Calls ``listener(ok)`` after every database check."""
        self._readiness_listeners.append(listener)

    async def _database_checked(self, ok: bool) -> None:
        self.metrics.database_up.set(1 if ok else 0)
        for listener in self._readiness_listeners:
            await listener(ok)

    async def check_database(self) -> bool:
        """One database check now (readiness and the queue gauges)."""
        return await self.queue_statistics.run_once()

    async def run_maintenance(self) -> None:
        """One pass of lease expiry and due-job promotion (tests with a fake clock call it
        after advancing the clock)."""
        await self.lease_expiry.run_once()
        await self.due_promotion.run_once()

    async def run_schedules(self) -> list[Fired]:
        """One pass of the schedule loop: enqueues the ticks that have come (tests with
        a fake clock call it after advancing the clock)."""
        return await self.schedule_ticks.run_once()

    async def drain(self, timeout_s: float) -> None:
        """Asks every worker to finish and go, and waits until they have or time is up."""
        await self.dispatcher.drain(timeout_s)

    async def stop_background(self) -> None:
        """Ends the dispatcher (after the batch in hand) and the loops, then every stream."""
        self.dispatcher.stop()
        self._stop.set()
        if self._listen_task is not None:
            self._listen_task.cancel()
        others = [t for t in (self._dispatch_task, self._listen_task) if t is not None]
        for task in [*self._tasks, *others]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.dispatcher.close_sessions()

    def close(self) -> None:
        """Releases threads and the database; call after ``stop_background``."""
        self.executors.shutdown()
        self.queue_statistics.close()
        self.store.close()

    def _token_revoked_elsewhere(self, token_id: str) -> None:
        closed = self.dispatcher.close_token_sessions(token_id)
        self.tokens.forget(token_id)
        if closed:
            log.info("token %s was revoked: ended %d worker streams opened with it", token_id, closed)

    # -- effects ------------------------------------------------------------------------

    def _absorb(self, effects: Effects) -> None:
        """Hands on what a committed transaction changed: metrics, waiters, the
        dispatcher (claimable jobs, due retries) and cancels for running attempts."""
        self.metrics.observe(effects)
        self.watch.finished(effects.terminal_job_ids)
        self.dispatcher.absorb(effects)
        self._wake_maintenance(leases=effects.leases_taken, scheduled=effects.next_run_at_ms is not None)
        for push in effects.cancel_pushes:
            self.dispatcher.cancel_attempt(push.worker_id, push.attempt_id, token_id=push.token_id)

    def _heard_of_jobs(self, origin: str | None) -> None:
        """Another replica made jobs claimable (or, at None, one may have while nobody
        listened): claims follow, here or there."""
        self.dispatcher.jobs_available()
        self.arrivals.signal()
        self._wake_maintenance(leases=True, scheduled=False)

    def _wake_maintenance(self, *, leases: bool, scheduled: bool) -> None:
        """Ends the idle sleep of the loops that this replica's writes gave work."""
        self.count_folding.cadence.wake()  # every write appends count deltas
        if leases:
            self.lease_expiry.cadence.wake()
        if scheduled:
            self.due_promotion.cadence.wake()

    # -- jobs ---------------------------------------------------------------------------

    async def enqueue(
        self, specs: Sequence[NewJobSpec], reachable: frozenset[str] | None = None
    ) -> list[Enqueued]:
        """Enqueues all of ``specs`` or none (see ``JobsService.enqueue``; ``reachable``:
        the caller's queue restriction, None: any). Workers of this
        replica waiting for work get their claims in the same transaction, so the new
        jobs go out with its commit."""
        now = self.clock.now_ms()
        due = {spec.queue for spec in specs if spec.run_at_ms is None or spec.run_at_ms <= now}
        # Only sessions taking from these queues claim, and only from them.
        reserved = self.dispatcher.reserve_claims(due) if due else None
        claims: BatchAnswers | None = None
        try:
            if reserved is None:
                enqueued = await self.executors.write(self.jobs.enqueue, list(specs), reachable)
            else:
                claim = self.dispatcher.claiming(reserved, self.ops.claim_in)
                enqueued, claims = await self.executors.write(
                    self.jobs.enqueue_then, list(specs), claim, reachable
                )
        finally:
            if reserved is not None:
                self.dispatcher.settle_claims(reserved, claims)
        if claims is not None:
            self._absorb(claims)
        self._wake_maintenance(leases=False, scheduled=any(spec.run_at_ms is not None for spec in specs))
        self.arrivals.signal()
        created = [(spec, item) for spec, item in zip(specs, enqueued, strict=True) if not item.existing]
        self.metrics.enqueued_many((spec.queue, spec.wire_name) for spec, _ in created)
        for spec, item in created:
            if item.state.terminal:  # under a parent that failed already
                self.metrics.completed(spec.queue, spec.wire_name, item.state)
            elif reserved is None or (spec.run_at_ms is not None and spec.run_at_ms > now):
                # (Every session with credit has just claimed: no wake-up is needed.)
                self.dispatcher.jobs_available(spec.run_at_ms, spec.queue)
        return enqueued

    async def get_job(self, job_id: str) -> JobRecord:
        return await self.executors.read(self.jobs.get_job, job_id)

    async def waiting_reason(self, job: JobRecord) -> str:
        """Why ``job`` waits to be claimed now ('' when nothing holds it back)."""
        return await self.executors.read(waiting.waiting_reason, self.store, self.clock, job)

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
        """R-8 (audited): the job after the write, cancelled or running with the request."""
        managed = await self.executors.write(self.manage.cancel, job_id, actor)
        self._absorb(managed.effects)
        return managed.job

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

    # -- recurring schedules (R-18) -----------------------------------------------------

    def _schedule_fired(self, fired: Fired) -> None:
        """A schedule's new jobs, as ``enqueue`` hands them on: metrics and the dispatcher."""
        created = [spec for spec, item in fired.enqueued if not item.existing]
        self.metrics.enqueued_many((spec.queue, spec.wire_name) for spec in created)
        for spec in created:
            self.dispatcher.jobs_available(spec.run_at_ms)

    async def create_schedule(self, spec: NewScheduleSpec, actor: Actor) -> ScheduleView:
        return await self.executors.write(self.schedules.create, spec, actor)

    async def list_schedules(self, *, page_size: int, page_token: str) -> tuple[list[ScheduleView], str]:
        return await self.executors.read(self.schedules.list, page_size=page_size, page_token=page_token)

    async def pause_schedule(self, name: str, actor: Actor) -> ScheduleView:
        return await self.executors.write(self.schedules.pause, name, actor)

    async def resume_schedule(self, name: str, actor: Actor) -> ScheduleView:
        return await self.executors.write(self.schedules.resume, name, actor)

    async def delete_schedule(self, name: str, actor: Actor) -> ScheduleView:
        """Deletes the schedule (audited); the jobs it enqueued stay."""
        return await self.executors.write(self.schedules.delete, name, actor)

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

    # -- tokens and the audit log -------------------------------------------------------

    def cached_principal(self, token: str) -> tuple[bool, Principal | None]:
        """Answers from the token cache when it can (see ``TokenService``)."""
        return self.tokens.cached_principal(token)

    async def authenticate(self, token: str) -> Principal | None:
        return await self.executors.read(self.tokens.authenticate, token)

    async def create_token(
        self, name: str, scopes: Iterable[str], queues: Iterable[str], actor: Actor
    ) -> NewToken:
        return await self.executors.write(self.tokens.create, name, list(scopes), list(queues), actor)

    async def list_tokens(self, *, include_revoked: bool) -> list[TokenRecord]:
        return await self.executors.read(self.tokens.list, include_revoked=include_revoked)

    async def revoke_token(self, token_id: str, actor: Actor) -> TokenRecord:
        """Revokes the token (audited); streams opened with it end now (here; other
        replicas' at their next reconnect)."""
        record = await self.executors.write(self.tokens.revoke, token_id, actor)
        self.dispatcher.close_token_sessions(record.id)
        return record

    async def open_dashboard_session(self, principal: Principal) -> str:
        """A dashboard session for a token that authenticated; its ID (the cookie)."""
        return await self.executors.write(self.dashboard_sessions.open, principal)

    async def dashboard_principal(self, session_id: str) -> Principal | None:
        """Who a dashboard session stands for, or None when it ended or never was."""
        return await self.executors.read(self.dashboard_sessions.principal, session_id)

    async def close_dashboard_session(self, session_id: str) -> bool:
        return await self.executors.write(self.dashboard_sessions.close, session_id)

    async def list_audit_events(
        self, *, action: str | None, target: str | None, page_size: int, page_token: str
    ) -> tuple[list[AuditEvent], str]:
        return await self.executors.read(
            self.audit_log.list, action=action, target=target, page_size=page_size, page_token=page_token
        )

    # -- queues (R-17) -------------------------------------------------------------------

    async def list_queues(self, *, page_size: int = 0, page_token: str = "") -> tuple[list[QueueStats], str]:
        """A page of queues by name (``page_size`` 0: the default, clamped to
        ``max_page_size``) and the next page's token ('' at the end)."""
        return await self.executors.read(self.queues.page, page_size=page_size, page_token=page_token)

    async def job_totals(self) -> tuple[int, dict[JobState, int]]:
        """How many queues are known, and the jobs of all of them per state."""
        return await self.executors.read(self.queues.totals)

    async def slot_demand(self, target: DemandTarget, cap: int) -> SlotDemand:
        """The worker slots ``target`` wants now, each count capped at ``cap``, read from
        the database (every replica answers the same; docs/autoscaling.md)."""
        return await self.executors.read(self.queues.demand, target, cap)

    async def delete_queue(self, name: str, actor: Actor) -> QueueRecord:
        """Audited; refused (nothing changes) while the queue holds jobs."""
        return await self.executors.write(self.queues.delete, name, actor)

    async def pause_queue(self, name: str, actor: Actor) -> QueueRecord:
        """Audited; the queue's jobs are claimed no more until it is resumed."""
        record, effects = await self.executors.write(self.queues.pause, name, actor)
        self._absorb(effects)
        return record

    async def resume_queue(self, name: str, actor: Actor) -> QueueRecord:
        """Audited; idle workers claim the queue's jobs again at once."""
        record, effects = await self.executors.write(self.queues.resume, name, actor)
        self._absorb(effects)
        self.arrivals.signal()
        return record

    async def set_queue_limit(self, name: str, limit: int | None, actor: Actor) -> QueueRecord:
        """Audited; ``None`` removes the limit."""
        record, effects = await self.executors.write(self.queues.set_limit, name, limit, actor)
        self._absorb(effects)
        return record

    async def set_queue_rate(
        self, name: str, count: int | None, period_ms: int, per_key: bool, actor: Actor
    ) -> QueueRecord:
        """Audited; a ``count`` of None removes the rate."""
        record, effects = await self.executors.write(
            self.queues.set_rate, name, count, period_ms, per_key, actor
        )
        self._absorb(effects)
        return record

    # -- activity (the dashboard) --------------------------------------------------------

    async def throughput(self, window_ms: int = HOUR_MS, queue: str | None = None) -> Throughput:
        """Jobs that ended per minute over the last ``window_ms`` (default an hour), from
        the per-minute counts the count fold keeps: no scan of the jobs."""
        return await self.executors.read(self.activity.throughput, window_ms, queue)

    async def lease_holders(self, limit: int = 100) -> list[LeaseHolder]:
        """The workers holding reserved or running jobs now, on any replica."""
        return await self.executors.read(self.activity.lease_holders, limit)

    def connected_workers(self) -> list[WorkerStream]:
        """The worker streams open on this coordinator (other replicas have their own)."""
        return sorted(
            (
                WorkerStream(
                    worker_id=s.worker_id,
                    queues=s.queues,
                    wire_names=s.wire_names,
                    capacity=s.capacity,
                    credit=s.credit,
                    lease_ms=s.lease_ms,
                    token_id=s.token_id,
                    draining=s.draining,
                )
                for s in self.dispatcher.sessions
            ),
            key=lambda w: (w.worker_id, w.queues),
        )

    # -- worker streams -----------------------------------------------------------------

    def check_accepting_workers(self) -> None:
        """Raises Unavailable while shutting down: the worker should go to another
        replica (or to our successor)."""
        if self.dispatcher.draining:
            raise Unavailable("coordinator is shutting down; connect again", reason="SHUTTING_DOWN")

    def connect_worker(self, hello: WorkerHello) -> WorkerSession:
        """Opens a session for a worker stream; raises Unavailable while shutting down."""
        self.check_accepting_workers()
        session = self.dispatcher.open(hello)
        self._connected_at_ms[session] = self.clock.now_ms()
        return session

    def disconnect_worker(self, session: WorkerSession) -> None:
        self._connected_at_ms.pop(session, None)
        self.dispatcher.close(session)

    async def list_workers(self) -> list[ConnectedWorker]:
        """The worker streams open on this replica, oldest first, each with how many of
        its jobs are reserved or running (read from the store, so a worker's claims
        count wherever it is connected). Other replicas' streams are not known here."""
        sessions = sorted(self.dispatcher.sessions, key=lambda s: s.number)
        in_flight = await self.executors.read(self.store.in_flight_by_worker, [s.worker_id for s in sessions])
        return [
            ConnectedWorker(
                worker_id=s.worker_id,
                queues=s.queues,
                wire_names=s.wire_names,
                capacity=s.capacity,
                in_flight=in_flight.get(s.worker_id, 0),
                credit=s.credit,
                connected_at_ms=self._connected_at_ms.get(s, 0),
                token_id=s.token_id,
            )
            for s in sessions
        ]
