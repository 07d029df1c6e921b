"""What every part of the facade shares: the pieces ``Coordinator`` owns (declared here,
built in ``Coordinator.__init__``) and the follow-ups of a committed write, which every
operation hands on the same way (``_absorb``).

The facade is split by concern, as temporal's client is: jobs (``job_calls``), queues and
activity (``queue_calls``), schedules (``schedule_calls``), tokens, dashboard sessions and
the audit log (``access_calls``), worker streams (``worker_calls``) and running the
process (``lifecycle``). ``Coordinator`` (``facade``) joins them into one object.
"""

from __future__ import annotations

import asyncio

from coordinator.app.arrivals import Arrivals
from coordinator.app.depths import DepthHistory
from coordinator.app.watch import TerminalWatch
from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerSession
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.clock import Clock
from coordinator.metrics import CoordinatorMetrics
from coordinator.scheduler.counts import QueueCountFolding
from coordinator.scheduler.cron import ScheduleTicks
from coordinator.scheduler.loop import WritePass
from coordinator.scheduler.retention import Retention
from coordinator.scheduler.revocations import RevokedTokenStreams
from coordinator.scheduler.stats import QueueStatistics
from coordinator.service.activity import ActivityService
from coordinator.service.audit import AuditLog
from coordinator.service.batch import WorkerOps
from coordinator.service.bulk import BulkService
from coordinator.service.dashboard import DashboardSessions
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors
from coordinator.service.jobs import JobsService
from coordinator.service.manage import ManagementService
from coordinator.service.queues import QueueService
from coordinator.service.retention import RetentionService
from coordinator.service.schedules import SchedulesService
from coordinator.service.tokens import TokenService
from coordinator.store import Store


class CoordinatorCore:
    """The pieces of one coordinator process, and the follow-ups of its writes."""

    config: CoordinatorConfig
    store: Store
    clock: Clock
    bootstrap_token: str | None
    metrics: CoordinatorMetrics
    executors: Executors
    watch: TerminalWatch
    arrivals: Arrivals
    tokens: TokenService
    dashboard_sessions: DashboardSessions
    jobs: JobsService
    ops: WorkerOps
    manage: ManagementService
    bulk: BulkService
    audit_log: AuditLog
    queues: QueueService
    activity: ActivityService
    schedules: SchedulesService
    dispatcher: Dispatcher
    count_folding: QueueCountFolding
    lease_expiry: WritePass
    due_promotion: WritePass
    queue_statistics: QueueStatistics
    depth_history: DepthHistory
    schedule_ticks: ScheduleTicks
    revoked_streams: RevokedTokenStreams
    retention_service: RetentionService
    retention: Retention
    replica: str
    _connected_at_ms: dict[WorkerSession, int]
    _stop: asyncio.Event

    @property
    def bounds(self) -> StoreBounds:
        return self.store.bounds

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
