"""The batch being collected: what the streams sent since the last batch was taken, and
which session sent each item, until the loop takes it for the writer.

It is bounded: ``items`` counts the starts, heartbeats, results and releases in it, and
stream readers wait while it is at ``StreamBounds.max_pending_batch_items``; its enqueue
and cancel calls are bounded apart, by the jobs they carry (``backlog``: a cancel counts
as one, and ``Dispatcher`` keeps it under ``max_pending_enqueue_jobs``). A session
has at most one heartbeat in it: a later one takes the earlier one's place, since only
the latest set of held attempts matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from coordinator.dispatch.joined_starts import JoinedStarts
from coordinator.dispatch.sessions import WorkerSession
from coordinator.service.cancel_items import CancelOutcome
from coordinator.service.work import (
    AttemptMessage,
    CancelItem,
    EnqueueItem,
    EnqueueOutcome,
    HeartbeatRequest,
    ResultReport,
    WorkBatch,
)


@dataclass(slots=True)
class Routes:
    """Which session asked for each entry of a batch, in order."""

    starts: list[WorkerSession] = field(default_factory=list)
    heartbeats: list[WorkerSession] = field(default_factory=list)
    results: list[WorkerSession] = field(default_factory=list)
    claims: list[WorkerSession] = field(default_factory=list)
    releases: list[WorkerSession] = field(default_factory=list)
    enqueues: list[asyncio.Future[EnqueueOutcome]] = field(default_factory=list)
    """For each enqueue item, where its caller waits for what became of it."""
    cancels: list[asyncio.Future[CancelOutcome]] = field(default_factory=list)
    """For each cancel item, likewise."""
    work_queues: set[str] = field(default_factory=set)
    """Where the enqueue items make jobs claimable now."""
    claim_launches: int = 0
    """How many batches with claims had gone to the writer once this one had: one more
    by its answer means a claim that may have read before its commit."""
    retiring: list[WorkerSession] = field(default_factory=list)
    """Sessions to close once this batch is delivered (it has no claims for them)."""
    lost_unread: list[set[str]] = field(default_factory=list)
    """For each heartbeat, the attempts answered lost without a store look-up
    (``dispatch.heartbeats``)."""
    joining: JoinedStarts | None = None
    """The batch's early hand-out, if it has one (``dispatch.joined_starts``)."""

    def sessions(self) -> set[WorkerSession]:
        return {*self.starts, *self.heartbeats, *self.results, *self.claims, *self.releases}


class PendingBatch:
    """The worker messages waiting for the next batch, with their routes."""

    __slots__ = ("_heartbeat_at", "batch", "enqueued_jobs", "items", "routes")

    def __init__(self) -> None:
        self.batch = WorkBatch()
        self.routes = Routes()
        self.items = 0
        """Starts, results, releases and heartbeats in ``batch`` (claims are added only
        as the batch is taken, and are bounded by the sessions' credit)."""
        self.enqueued_jobs = 0
        """The jobs of the enqueue items in ``batch``."""
        self._heartbeat_at: dict[WorkerSession, int] = {}
        """Where each session's heartbeat is in ``batch.heartbeats``."""

    def __bool__(self) -> bool:
        return bool(self.batch)

    def add_start(self, session: WorkerSession, attempt_id: str) -> None:
        self.batch.starts.append(AttemptMessage(attempt_id, session.identity))
        self.routes.starts.append(session)
        self.items += 1

    def add_result(self, session: WorkerSession, report: ResultReport) -> None:
        self.batch.results.append(
            ResultReport(report.attempt_id, report.report, report.output, session.identity)
        )
        self.routes.results.append(session)
        self.items += 1

    def add_release(self, session: WorkerSession, attempt_id: str) -> None:
        self.batch.releases.append(AttemptMessage(attempt_id, session.identity))
        self.routes.releases.append(session)
        self.items += 1

    def add_enqueue(self, item: EnqueueItem, due_queues: AbstractSet[str]) -> asyncio.Future[EnqueueOutcome]:
        """Adds an enqueue call (making jobs claimable now in ``due_queues``); the future
        resolves once its batch was written."""
        answered: asyncio.Future[EnqueueOutcome] = asyncio.get_running_loop().create_future()
        self.batch.enqueues.append(item)
        self.routes.enqueues.append(answered)
        self.routes.work_queues.update(due_queues)
        self.enqueued_jobs += len(item.specs)
        return answered

    def add_cancel(self, item: CancelItem) -> asyncio.Future[CancelOutcome]:
        """Adds a single-job cancel; the future resolves once its batch was written."""
        answered: asyncio.Future[CancelOutcome] = asyncio.get_running_loop().create_future()
        self.batch.cancels.append(item)
        self.routes.cancels.append(answered)
        return answered

    @property
    def backlog(self) -> int:
        """The jobs the calls waiting carry: an enqueue's jobs, one per cancel."""
        return self.enqueued_jobs + len(self.batch.cancels)

    def add_heartbeat(
        self, session: WorkerSession, attempt_ids: Sequence[str], lease_ms: int, progress: Mapping[str, str]
    ) -> bool:
        """Adds a heartbeat; False when it took the place of the session's earlier one
        (which is then answered by this one's answer, and costs nothing more)."""
        request = HeartbeatRequest(attempt_ids, lease_ms, session.identity, progress)
        at = self._heartbeat_at.get(session)
        if at is not None:
            # Its progress reports still count where this one has none newer (a worker
            # sends only changes).
            earlier = self.batch.heartbeats[at].progress
            if earlier:
                request = HeartbeatRequest(attempt_ids, lease_ms, session.identity, {**earlier, **progress})
            self.batch.heartbeats[at] = request
            return False
        self._heartbeat_at[session] = len(self.batch.heartbeats)
        self.batch.heartbeats.append(request)
        self.routes.heartbeats.append(session)
        self.items += 1
        return True

    def take(self) -> tuple[WorkBatch, Routes]:
        """What was collected; collecting starts over."""
        batch, routes = self.batch, self.routes
        self.batch, self.routes, self.items, self._heartbeat_at = WorkBatch(), Routes(), 0, {}
        self.enqueued_jobs = 0
        return batch, routes
