"""``Coordinator``: the store, executors, dispatcher, services and background loops of
one coordinator process, and every operation transports may call, each with its
follow-ups (waking the dispatcher, pushing a cancel, closing a revoked token's streams,
waking waiters, counting metrics) done here, once, whatever the transport.

The operations live in one module per concern (``coordinator.app.core`` lists them);
this module builds the pieces they share.

``await Coordinator.open(config)`` builds it; ``start()`` runs the dispatcher and the
loops; ``drain()``, ``stop_background()`` and ``close()`` take it down in that order
(``coordinator.process`` does so around its servers).
"""

from __future__ import annotations

import asyncio
import os
import random
import socket

from coordinator.app.access_calls import AccessCalls
from coordinator.app.arrivals import Arrivals
from coordinator.app.depths import DepthHistory
from coordinator.app.job_calls import DEFAULT_WAIT_MS, MAX_WAIT_MS, JobCalls
from coordinator.app.lifecycle import Lifecycle, ReadinessListener
from coordinator.app.queue_calls import QueueCalls
from coordinator.app.schedule_calls import ScheduleCalls
from coordinator.app.startup import open_riding_out_blips
from coordinator.app.watch import TerminalWatch
from coordinator.app.worker_calls import WorkerCalls
from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher
from coordinator.domain.clock import Clock, OffsetClock, SystemClock
from coordinator.metrics import CoordinatorMetrics
from coordinator.scheduler.clock import database_offset_ms
from coordinator.scheduler.counts import QueueCountFolding
from coordinator.scheduler.cron import ScheduleTicks
from coordinator.scheduler.due import due_promotion
from coordinator.scheduler.leases import lease_expiry
from coordinator.scheduler.loop import Cadence
from coordinator.scheduler.retention import Retention
from coordinator.scheduler.revocations import RevokedTokenStreams
from coordinator.scheduler.stats import QueueStatistics
from coordinator.service.activity import ActivityService
from coordinator.service.audit import AuditLog
from coordinator.service.batch import WorkerOps
from coordinator.service.bulk import BulkService
from coordinator.service.dashboard import DashboardSessions
from coordinator.service.executors import Executors
from coordinator.service.jobs import JobsService
from coordinator.service.manage import ManagementService
from coordinator.service.queues import QueueService
from coordinator.service.retention import RetentionService
from coordinator.service.schedules import SchedulesService
from coordinator.service.tokens import TokenService, check_bootstrap_token
from coordinator.store import DatabaseTimeouts, Store

__all__ = ["DEFAULT_WAIT_MS", "MAX_WAIT_MS", "POSTGRES_BATCHES_IN_FLIGHT", "Coordinator", "ReadinessListener"]

POSTGRES_BATCHES_IN_FLIGHT = 2
"""Worker batches written at once on PostgreSQL: a batch is a dozen round trips, so the
next one starts while the last commits (enqueue calls are items of these batches); the
writer's other threads (see ``service.executors``) stay free for management writes and
maintenance."""


class Coordinator(JobCalls, QueueCalls, ScheduleCalls, AccessCalls, WorkerCalls, Lifecycle):
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
        self.bootstrap_token = None
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
        self._build_services(rng)
        self.dispatcher = Dispatcher(
            self.ops.process,
            config,
            clock,
            self.executors,
            self._absorb,
            on_sessions_changed=lambda sessions: self.metrics.workers(s.queues for s in sessions),
            batches_in_flight=POSTGRES_BATCHES_IN_FLIGHT if self.store.postgres else 1,
        )
        self._build_loops()
        self._readiness_listeners = []
        self.replica = f"{socket.gethostname()}-{os.getpid()}"
        """This process among the replicas: host name and process ID (``list_workers``)."""
        self._connected_at_ms = {}
        self._stop = asyncio.Event()
        self._tasks = []
        self._dispatch_task = None
        self._listen_task = None
        """PostgreSQL LISTEN: it has no stop event of its own, so it is cancelled."""

    def _build_services(self, rng: random.Random) -> None:
        store, clock, config = self.store, self.clock, self.config
        self.tokens = TokenService(store, clock, config.auth_cache_ttl_s)
        self.dashboard_sessions = DashboardSessions(
            store, clock, config.dashboard_session_ttl_s, config.dashboard_limits
        )
        self.jobs = JobsService(store, clock, config, rng)
        self.ops = WorkerOps(store, clock, config, rng, jobs=self.jobs)
        self.manage = ManagementService(store, clock)
        self.bulk = BulkService(self.manage)
        self.audit_log = AuditLog(store, config)
        self.queues = QueueService(store, clock, config)
        self.activity = ActivityService(store, clock)
        self.schedules = SchedulesService(store, clock, config, self.jobs)
        self.retention_service = RetentionService(store, clock)

    def _build_loops(self) -> None:
        """The background loops (started by ``start``)."""
        store, clock, config = self.store, self.clock, self.config
        interval, idle = config.maintenance_interval_s, config.idle_interval_s
        self.count_folding = QueueCountFolding(
            self.queues, self.executors, Cadence(config.queue_count_fold_interval_s, idle)
        )
        self.lease_expiry = lease_expiry(self.ops, self.executors, self._absorb, Cadence(interval, idle))
        self.due_promotion = due_promotion(self.ops, self.executors, self._absorb, Cadence(interval, idle))
        self.depth_history = DepthHistory()
        self.queue_statistics = QueueStatistics(
            store,
            clock,
            config.health_check_interval_s,
            config.health_check_timeout_s,
            self._queue_stats_read,
            self._database_checked,
            max_walked_jobs=config.held_back_walked_jobs,
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
        self.retention = Retention(
            self.retention_service, self.executors, config.retention_ages_ms(), config.retention_interval_s
        )

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
        creates the bootstrap admin token when there is no token yet. A database
        connection lost on the way is tried again for up to
        ``config.startup_database_wait_s`` (``app.startup``), unless ``store`` is given:
        its opener owns it."""
        config.retention_ages_ms()  # a bad retention setting fails before the store opens
        if config.bootstrap_token is not None:
            check_bootstrap_token(config.bootstrap_token)  # and so does a malformed token
        if store is not None:
            return await cls._open_once(config, clock, store, rng, 0.0)

        async def once(left_s: float) -> Coordinator:
            return await cls._open_once(config, clock, None, rng, left_s)

        return await open_riding_out_blips(once, config.startup_database_wait_s)

    @classmethod
    async def _open_once(
        cls,
        config: CoordinatorConfig,
        clock: Clock | None,
        store: Store | None,
        rng: random.Random | None,
        store_wait_s: float,
    ) -> Coordinator:
        if store is None:
            timeouts = DatabaseTimeouts(
                pg_idle_in_transaction_timeout_ms=config.pg_idle_in_transaction_timeout_ms,
                pg_lock_timeout_ms=config.pg_lock_timeout_ms,
                pg_statement_timeout_ms=config.pg_statement_timeout_ms,
                sqlite_busy_timeout_ms=config.sqlite_busy_timeout_ms,
            )
            store = await asyncio.to_thread(
                Store.open, config.database_url, bounds=config.bounds, timeouts=timeouts, wait_s=store_wait_s
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
