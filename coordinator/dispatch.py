"""The hot path: worker sessions, credit, and the batch loop that pushes work.

Stream readers hand every message to the dispatcher; one loop gathers what arrived in
the batch window, carries it out in one transaction (``WorkerOps.process``) together
with claims for every session that has credit, and routes the answers back to each
session's outbox. Jobs are pushed as soon as a wake-up says work may be there: an
enqueue, a result, a release, a lease recovery or a due retry (no polling interval on
the hot path; an idle re-check covers other replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from concurrent.futures import Executor
from dataclasses import dataclass, field

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import Clock
from coordinator.metrics import CoordinatorMetrics
from coordinator.watch import TerminalWatch
from coordinator.worker_ops import (
    BatchAnswers,
    Claimed,
    ClaimRequest,
    ResultAnswer,
    ResultReport,
    StartAnswer,
    WorkBatch,
    WorkerOps,
)

log = logging.getLogger(__name__)

_session_numbers = itertools.count(1)
CANCEL_REASON = "cancelled by request"


@dataclass(eq=False)
class WorkerSession:
    """One connected worker stream."""

    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    capacity: int
    lease_ms: int
    credit: int = 0
    draining: bool = False
    token_id: str | None = None
    """The token the stream was opened with (None with auth off)."""
    number: int = field(default_factory=lambda: next(_session_numbers))
    outbox: asyncio.Queue[object] = field(default_factory=asyncio.Queue)

    def send(self, message: object) -> None:
        self.outbox.put_nowait(message)

    def close(self) -> None:
        """Ends the session's outgoing stream (a ``None`` in the outbox)."""
        self.outbox.put_nowait(None)


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    lost: set[str]
    lease_expires_at_ms: int


@dataclass(slots=True)
class _Routes:
    """Which session asked for each entry of a batch, in order."""

    starts: list[WorkerSession] = field(default_factory=list)
    heartbeats: list[WorkerSession] = field(default_factory=list)
    results: list[WorkerSession] = field(default_factory=list)
    claims: list[WorkerSession] = field(default_factory=list)
    releases: list[WorkerSession] = field(default_factory=list)
    retiring: list[WorkerSession] = field(default_factory=list)
    """Sessions to close once this batch is delivered (it has no claims for them)."""

    def sessions(self) -> set[WorkerSession]:
        return {*self.starts, *self.heartbeats, *self.results, *self.claims, *self.releases}


class Dispatcher:
    def __init__(
        self,
        ops: WorkerOps,
        config: CoordinatorConfig,
        clock: Clock,
        executor: Executor,
        watch: TerminalWatch,
        metrics: CoordinatorMetrics | None = None,
    ) -> None:
        self.ops = ops
        self.config = config
        self.clock = clock
        self.executor = executor
        self.watch = watch
        self.metrics = metrics
        self.sessions: set[WorkerSession] = set()
        self._batch = WorkBatch()
        self._routes = _Routes()
        self._wake = asyncio.Event()
        self._claim_needed = True
        self._next_due_ms: int | None = None
        self._stopping = False
        self.draining = False
        self.claim_rounds = 0
        """Batches written that carried claims (tests wait on it; metrics can export it)."""
        self._idle = asyncio.Event()
        self._retiring: list[WorkerSession] = []

    # -- called by stream handlers -------------------------------------------------

    def open(self, session: WorkerSession) -> None:
        self.sessions.add(session)
        self._idle.clear()
        self._count_workers()

    def close(self, session: WorkerSession) -> None:
        """The stream ended. Its leases stay: they lapse unless the worker reconnects
        and heartbeats them (R-4/R-5 decide what a lapse costs)."""
        self.sessions.discard(session)
        if not self.sessions:
            self._idle.set()
        self._count_workers()

    def _count_workers(self) -> None:
        if self.metrics is not None:
            self.metrics.workers(session.queues for session in self.sessions)

    def add_credit(self, session: WorkerSession, count: int) -> None:
        session.credit = min(session.credit + max(count, 0), session.capacity)
        self._claim_needed = True
        self._wake.set()

    def start(self, session: WorkerSession, attempt_id: str) -> None:
        self._batch.starts.append(attempt_id)
        self._routes.starts.append(session)
        self._wake.set()

    def heartbeat(self, session: WorkerSession, attempt_ids: list[str], lease_ms: int) -> None:
        self._batch.heartbeats.append((attempt_ids, lease_ms))
        self._routes.heartbeats.append(session)
        self._wake.set()

    def result(self, session: WorkerSession, report: ResultReport) -> None:
        self._batch.results.append(report)
        self._routes.results.append(session)
        self._wake.set()

    def retire(self, session: WorkerSession) -> None:
        """Ends a session cleanly (its stream reached its maximum age): no more claims
        for it, and its stream closes once the batch in hand is delivered, so no
        assignment is lost on the way. The worker reconnects and re-sends what is
        unanswered (starts, results, releases)."""
        if session.draining or session not in self.sessions:
            return
        session.draining = True
        self._retiring.append(session)
        self._wake.set()

    def release(self, session: WorkerSession, attempt_id: str) -> None:
        self._batch.releases.append(attempt_id)
        self._routes.releases.append(session)
        self._wake.set()

    # -- called when jobs may have become claimable --------------------------------

    def jobs_available(self, run_at_ms: int | None = None) -> None:
        """A new or recovered job exists; ``run_at_ms`` when it only becomes due later."""
        if run_at_ms is not None and run_at_ms > self.clock.now_ms():
            self._note_due(run_at_ms)
            return
        self._claim_needed = True
        self._wake.set()

    def absorb(self, answers: BatchAnswers) -> None:
        """Takes in what a batch or a maintenance pass changed."""
        if self.metrics is not None:
            self.metrics.observe(answers)
        self.watch.finished(answers.terminal_job_ids)
        if answers.available_changed:
            self.jobs_available()
        if answers.next_run_at_ms is not None:
            self._note_due(answers.next_run_at_ms)

    def _note_due(self, run_at_ms: int) -> None:
        if self._next_due_ms is None or run_at_ms < self._next_due_ms:
            self._next_due_ms = run_at_ms
            self._wake.set()

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Runs batches until ``stop()``; the batch pending then is still written."""
        loop = asyncio.get_running_loop()
        while True:
            await self._sleep_until_woken()
            if self.config.batch_window_ms > 0 and not self._stopping:
                await asyncio.sleep(self.config.batch_window_ms / 1000)
            batch, routes = self._take()
            if batch:
                try:
                    answers = await loop.run_in_executor(self.executor, self.ops.process, batch)
                except Exception:
                    # The store failed: nothing of the batch was written. Closing the
                    # streams makes their workers reconnect and resend what is unacknowledged.
                    log.exception("worker batch failed; closing %d affected streams", len(routes.sessions()))
                    for session in routes.sessions():
                        session.close()
                    await asyncio.sleep(0.1)
                else:
                    self._deliver(answers, routes)
            for session in routes.retiring:
                log.info(
                    "worker %s: stream reached its maximum age; ending it",
                    session.worker_id,
                    extra={"worker_id": session.worker_id},
                )
                session.close()
            if self._stopping and not self._batch:
                return

    async def _sleep_until_woken(self) -> None:
        timeout = self.config.idle_recheck_interval_s
        if self._next_due_ms is not None:
            timeout = min(timeout, max(self._next_due_ms - self.clock.now_ms(), 0) / 1000)
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            self._claim_needed = True  # idle re-check: another replica may have added work
        self._wake.clear()
        if self._next_due_ms is not None and self._next_due_ms <= self.clock.now_ms():
            self._next_due_ms = None
            self._claim_needed = True

    def _take(self) -> tuple[WorkBatch, _Routes]:
        batch, routes = self._batch, self._routes
        self._batch, self._routes = WorkBatch(), _Routes()
        # Claims for these were taken, if at all, by the batch before: none is in this one.
        routes.retiring, self._retiring = self._retiring, []
        if self._claim_needed and not self._stopping:
            self._claim_needed = False
            for session in self.sessions:
                if session.credit > 0 and not session.draining and session.wire_names:
                    batch.claims.append(
                        ClaimRequest(
                            session.worker_id,
                            session.queues,
                            session.wire_names,
                            session.credit,
                            session.lease_ms,
                        )
                    )
                    routes.claims.append(session)
        return batch, routes

    def _deliver(self, answers: BatchAnswers, routes: _Routes) -> None:
        from coordinator.api import protocol  # the wire form lives in the api layer

        for session, start in zip(routes.starts, answers.starts, strict=True):
            session.send(protocol.start_answer(start))
        for session, lost, lease_ms, cancels in zip(
            routes.heartbeats, answers.lost, answers.lease_expires_at_ms, answers.cancels, strict=True
        ):
            session.send(protocol.heartbeat_answer(HeartbeatAnswer(lost, lease_ms)))
            for attempt_id in sorted(cancels):  # repeated until the run ends
                session.send(protocol.cancel(attempt_id, CANCEL_REASON))
        for session, result in zip(routes.results, answers.results, strict=True):
            session.send(protocol.result_ack(result))
        refill = False
        if routes.claims:
            self.claim_rounds += 1
        for session, claimed in zip(routes.claims, answers.claims, strict=True):
            session.credit -= len(claimed)
            for item in claimed:
                session.send(protocol.assignment(item))
            # A full batch means more may be waiting for this session's remaining credit.
            refill = refill or (bool(claimed) and session.credit > 0)
        self.absorb(answers)
        if refill:
            self._claim_needed = True
            self._wake.set()

    # -- management -----------------------------------------------------------------

    def cancel_attempt(self, worker_id: str, attempt_id: str) -> int:
        """R-8: pushes a cancel to the streams of ``worker_id`` on this replica; returns
        how many. A worker on another replica hears it in its next heartbeat answer."""
        from coordinator.api import protocol

        sessions = [s for s in self.sessions if s.worker_id == worker_id]
        for session in sessions:
            session.send(protocol.cancel(attempt_id, CANCEL_REASON))
        return len(sessions)

    def close_token_sessions(self, token_id: str) -> int:
        """Ends the streams opened with a token that was just revoked."""
        sessions = [s for s in self.sessions if s.token_id == token_id]
        for session in sessions:
            session.close()
        return len(sessions)

    # -- shutdown -------------------------------------------------------------------

    async def drain(self, timeout_s: float) -> None:
        """Asks every worker to finish and go, and waits until they have (or time is up).

        Workers are told a deadline ``drain_reserve_s`` (at most half the timeout) shorter,
        so what they interrupt then is still reported and written (R-12).
        """
        from coordinator.api import protocol

        self.draining = True
        notice_s = timeout_s - min(self.config.drain_reserve_s, timeout_s / 2)
        for session in self.sessions:
            session.draining = True
            session.send(protocol.drain(notice_s))
        if self.sessions:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout_s)
        # Let the loop write what the last results carried before it stops.
        await asyncio.sleep(self.config.batch_window_ms / 1000 + 0.05)

    def stop(self) -> None:
        """Ends the loop after the batch in hand; ``run()`` returns then."""
        self._stopping = True
        self._wake.set()

    def close_sessions(self) -> None:
        for session in list(self.sessions):
            session.close()


__all__ = ["Claimed", "Dispatcher", "HeartbeatAnswer", "ResultAnswer", "StartAnswer", "WorkerSession"]
