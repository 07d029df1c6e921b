"""The hot path: worker sessions, credit, and the batch loop that pushes work.

Stream readers hand every message to the dispatcher; one loop gathers what arrived in
the batch window (``dispatch.collecting``), carries it out in one transaction
(``service.batch.WorkerOps.process``) together with claims for every session that has
credit (``dispatch.claims``), and routes the answers back to each session's outbox
(``dispatch.answers``). Jobs are pushed as soon as a wake-up says work may be there: an
enqueue, a result, a release, a lease recovery or a due retry (no polling interval on
the hot path; an idle re-check covers other replicas). Every wake-up goes through
``dispatch.wakeups``.

The loop's states (``LoopState``; docs/internals.md draws them):

| state | leaves when | to |
| --- | --- | --- |
| idle | woken (``Wake``), a due job's time, the idle re-check | gathering |
| gathering | the batch window is over (at once without one) | waiting for a slot |
| waiting for a slot | a writer slot is free: the batch is taken and launched | idle |
| waiting for a slot | ... and a stream is retiring, or the loop stopping | settling |
| settling | every batch in flight was delivered; retired streams close | idle |
| settling, waiting for a slot | the same, stopping and nothing pending | stopped |

Besides the loop, a writer answering while a batch waits launches it at once, before
its own answers are delivered (``_launch_next``).

The dispatcher itself is serving, then (on SIGTERM) draining: no new streams or enqueue
claims, workers told to finish; then stopping: what is pending is written, no claims.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import claims, heartbeats
from coordinator.dispatch.answers import CANCEL_REASON, route_answers
from coordinator.dispatch.calls import answer_calls
from coordinator.dispatch.collecting import PendingBatch, Routes
from coordinator.dispatch.deliveries import CancelNotice, DrainNotice, WorkerHello
from coordinator.dispatch.joined_starts import StartJoins
from coordinator.dispatch.sessions import WorkerSession
from coordinator.dispatch.wakeups import Wake, Wakeups
from coordinator.dispatch.writer_slots import WriterSlots
from coordinator.domain.bounds import STREAM_BOUNDS, StreamBounds
from coordinator.domain.clock import Clock
from coordinator.service.cancel_items import CancelOutcome
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors
from coordinator.service.work import (
    NO_PROGRESS,
    BatchAnswers,
    CancelItem,
    ClaimRequest,
    EnqueueItem,
    EnqueueOutcome,
    ResultReport,
    WorkBatch,
)

log = logging.getLogger(__name__)

ProcessBatch = Callable[[WorkBatch], BatchAnswers]


class LoopState(enum.Enum):
    """Where the batch loop is (the table in this module's docstring)."""

    IDLE = "idle"
    GATHERING = "gathering"
    WAITING_FOR_SLOT = "waiting for a slot"
    SETTLING = "settling"
    STOPPED = "stopped"


TRANSITIONS: dict[LoopState, frozenset[LoopState]] = {
    LoopState.IDLE: frozenset({LoopState.GATHERING}),
    LoopState.GATHERING: frozenset({LoopState.WAITING_FOR_SLOT}),
    LoopState.WAITING_FOR_SLOT: frozenset({LoopState.IDLE, LoopState.SETTLING, LoopState.STOPPED}),
    LoopState.SETTLING: frozenset({LoopState.IDLE, LoopState.STOPPED}),
    LoopState.STOPPED: frozenset(),
}


class Phase(enum.Enum):
    """The dispatcher's life: serving, then draining (``drain``), then stopping (``stop``)."""

    SERVING = "serving"
    DRAINING = "draining"
    STOPPING = "stopping"


class Dispatcher:
    def __init__(
        self,
        process: ProcessBatch,
        config: CoordinatorConfig,
        clock: Clock,
        executors: Executors,
        on_effects: Callable[[Effects], None],
        on_sessions_changed: Callable[[set[WorkerSession]], None] = lambda sessions: None,
        *,
        batches_in_flight: int = 1,
        stream_bounds: StreamBounds = STREAM_BOUNDS,
    ) -> None:
        """``process`` carries out one batch (``WorkerOps.process``) on the writer;
        ``on_effects`` hears what each batch changed (the facade hands it on).
        ``batches_in_flight``: how many batches may be written at once
        (``dispatch.writer_slots``)."""
        self.slots = WriterSlots(batches_in_flight)
        self.process = process
        self.config = config
        self.clock = clock
        self.executors = executors
        self.on_effects = on_effects
        self.on_sessions_changed = on_sessions_changed
        self.stream_bounds = stream_bounds
        self.sessions: set[WorkerSession] = set()
        """One record per connected worker stream."""
        self._no_sessions = asyncio.Event()
        self.pending = PendingBatch()
        self._claim_launches = 0
        """Batches with claims handed to the writer so far."""
        self._looping = False
        """``run`` is running (enqueue and cancel calls join its batches only then)."""
        self._enqueue_room = asyncio.Event()
        """Set when a batch is taken: enqueue and cancel calls waiting for room try again."""
        self.joins = StartJoins(self.sessions, wait_s=config.join_start_wait_ms / 1000)
        """Claims handed out before their commit; any wake-up ends the wait for starts."""
        self.wakeups = Wakeups(config, clock, on_wake=self.joins.end_wait)
        self.turns = claims.Turns()
        self._retiring: list[WorkerSession] = []
        """Sessions to close once what is in flight for them is delivered."""
        self.state = LoopState.IDLE
        self.phase = Phase.SERVING
        self.claim_rounds = 0
        """Batches written that carried claims (tests wait on it; metrics can export it)."""

    @property
    def batches_in_flight(self) -> int:
        return self.slots.capacity

    @property
    def draining(self) -> bool:
        """Shutting down: no new streams, no claims."""
        return self.phase is not Phase.SERVING

    # -- called by stream handlers -------------------------------------------------

    def open(self, hello: WorkerHello) -> WorkerSession:
        session = WorkerSession(
            self,
            hello.worker_id,
            hello.queues,
            hello.wire_names,
            hello.capacity,
            hello.lease_ms,
            token_id=hello.token_id,
            token_queues=hello.token_queues,
            budget=self.stream_bounds.stream_budget(hello.capacity),
            unheld_checks_left=self.stream_bounds.unheld_heartbeat_checks(hello.capacity),
            host=hello.host,
            sdk=hello.sdk,
        )
        self.sessions.add(session)
        self._no_sessions.clear()
        self.on_sessions_changed(self.sessions)
        return session

    def close(self, session: WorkerSession) -> None:
        """The stream ended. Its leases stay: they lapse unless the worker reconnects
        and heartbeats them (R-4/R-5 decide what a lapse costs)."""
        self.sessions.discard(session)
        if not self.sessions:
            self._no_sessions.set()
        self.on_sessions_changed(self.sessions)

    def add_credit(self, session: WorkerSession, count: int) -> None:
        claims.add_credit(session, count)
        self.wakeups.wake(Wake.CREDIT)

    def start(self, session: WorkerSession, attempt_id: str) -> None:
        if self.joins.offer(session, attempt_id):
            return  # written in the transaction of its claim, and answered with it
        self.pending.add_start(session, attempt_id)
        self.wakeups.wake(Wake.MESSAGE)

    def heartbeat(
        self,
        session: WorkerSession,
        attempt_ids: Sequence[str],
        lease_ms: int,
        progress: Mapping[str, str] = NO_PROGRESS,
    ) -> None:
        if self.pending.add_heartbeat(session, attempt_ids, lease_ms, progress):
            self.wakeups.wake(Wake.MESSAGE)
        else:
            session.give_back(1)  # its earlier heartbeat's answer answers it

    def result(self, session: WorkerSession, report: ResultReport) -> None:
        self.pending.add_result(session, report)
        self.wakeups.wake(Wake.MESSAGE)

    def release(self, session: WorkerSession, attempt_id: str) -> None:
        self.pending.add_release(session, attempt_id)
        self.wakeups.wake(Wake.MESSAGE)

    def batch_full(self) -> bool:
        """Whether the batch waiting for the writer is at its bound, or the loop is
        stopping: readers wait. (While stopping, what was taken in is written and the
        streams close; a client sending without end cannot keep the loop going.)"""
        return (
            self.phase is Phase.STOPPING or self.pending.items >= self.stream_bounds.max_pending_batch_items
        )

    def retire(self, session: WorkerSession) -> None:
        """Ends a session cleanly (its stream reached its maximum age): no more claims
        for it, and its stream closes once the batch in hand is delivered, so no
        assignment is lost on the way. The worker reconnects and re-sends what is
        unanswered (starts, results, releases)."""
        if session.draining or session not in self.sessions:
            return
        session.draining = True
        self._retiring.append(session)
        self.wakeups.wake(Wake.STREAM_ENDING)

    # -- called when jobs may have become claimable --------------------------------

    def jobs_available(self, run_at_ms: int | None = None, queue: str | None = None) -> None:
        """A new or recovered job exists (in ``queue``; None: in any); ``run_at_ms`` when
        it only becomes due later."""
        if run_at_ms is not None and run_at_ms > self.clock.now_ms():
            self.wakeups.due(run_at_ms)
        else:
            self.wakeups.wake(Wake.WORK, queue)

    def hears_all(self, hearing: bool) -> None:
        """Whether every write that makes jobs claimable reaches ``jobs_available``: this
        process's own always do; another replica's through PostgreSQL's LISTEN, while
        its connection is up. While they do, idle sessions re-check only rarely."""
        self.wakeups.hears_all = hearing

    def absorb(self, effects: Effects) -> None:
        """Wakes for what a batch, an operator action or a maintenance pass changed."""
        if effects.available_changed:
            self.wakeups.wake(Wake.WORK)
        if effects.next_run_at_ms is not None:
            self.wakeups.due(effects.next_run_at_ms)

    # -- enqueue and cancel calls, items of the batch ---------------------------------------

    @property
    def takes_calls(self) -> bool:
        """Whether an enqueue or cancel call may join the batch: while the loop runs, and
        not once it is stopping (it may have written its last batch). Otherwise the caller
        writes the call on its own."""
        return self._looping and self.phase is not Phase.STOPPING

    async def enqueue(self, item: EnqueueItem, due_queues: AbstractSet[str]) -> EnqueueOutcome:
        """Adds an enqueue call to the next batch and returns what became of it once that
        batch committed (or the error that failed it, or the whole batch). The batch
        claims for the sessions waiting on ``due_queues`` (where the call makes jobs
        claimable now) after writing it, in the same transaction. While the calls
        waiting hold ``max_pending_enqueue_jobs`` jobs, the call waits for the next batch
        to be taken (one call alone is always taken, whatever its size)."""
        await self._room_for(len(item.specs))
        answered = self.pending.add_enqueue(item, due_queues)
        for queue in sorted(due_queues):
            self.wakeups.wake(Wake.WORK, queue)
        if not due_queues:
            self.wakeups.wake(Wake.MESSAGE)
        return await answered

    async def cancel(self, item: CancelItem) -> CancelOutcome:
        """Adds a single-job cancel to the next batch and returns what became of it once
        that batch committed (or the error that failed the whole batch). It waits for
        room as an enqueue call of one job does (``max_pending_enqueue_jobs``)."""
        await self._room_for(1)
        answered = self.pending.add_cancel(item)
        self.wakeups.wake(Wake.MESSAGE)  # a cancel makes no job claimable: no claims
        return await answered

    async def _room_for(self, jobs: int) -> None:
        """Waits while the calls waiting (``PendingBatch.backlog``) and ``jobs`` more would
        pass ``max_pending_enqueue_jobs``, until the next batch is taken."""
        while self.pending.backlog and self.pending.backlog + jobs > self.config.max_pending_enqueue_jobs:
            self._enqueue_room.clear()
            await self._enqueue_room.wait()

    def _hand_back(
        self, sessions: list[WorkerSession], requests: list[ClaimRequest], answers: BatchAnswers
    ) -> None:
        refill = claims.hand_back(
            sessions, requests, answers, connected=self.sessions, bounds=self.config.bounds
        )
        if refill:
            self.wakeups.wake(Wake.CREDIT)

    # -- the loop -------------------------------------------------------------------

    def _enter(self, state: LoopState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise RuntimeError(f"dispatcher loop: no transition from {self.state.value} to {state.value}")
        self.state = state

    async def run(self) -> None:
        """Runs batches until ``stop()``; the batch pending then is still written, and
        every batch in flight."""
        self._looping = True
        try:
            while True:
                await self.wakeups.sleep()
                self._enter(LoopState.GATHERING)
                stopping = self.phase is Phase.STOPPING
                window_s = self.config.batch_window_ms / 1000 if not stopping else 0
                await asyncio.sleep(window_s)  # (0: the other streams' messages of this wake-up)
                self._enter(LoopState.WAITING_FOR_SLOT)
                # A slot first: what arrives meanwhile joins the batch taken next.
                await self.slots.wait_for_one()
                batch, routes = self._take()
                if routes.retiring or self.phase is Phase.STOPPING:
                    # A stream ends only after everything written for it was delivered.
                    self._enter(LoopState.SETTLING)
                    await self.slots.settle()
                if batch:
                    written = self._launch(batch, routes)
                    if routes.retiring:
                        await asyncio.wait({written})
                self._close_retired(routes)
                if self.phase is Phase.STOPPING and not self.pending:
                    self._enter(LoopState.STOPPED)
                    return
                self._enter(LoopState.IDLE)
        finally:
            self._looping = False
            await self.slots.settle()

    def _take(self) -> tuple[WorkBatch, Routes]:
        was_full = self.pending.items >= self.stream_bounds.max_pending_batch_items
        batch, routes = self.pending.take()
        if batch.enqueues or batch.cancels:
            self._enqueue_room.set()
        if was_full:
            for session in self.sessions:
                session.make_room()
        if batch.heartbeats:
            routes.lost_unread = heartbeats.screen(routes.heartbeats, batch.heartbeats)
        # Claims for these were taken, if at all, by the batch before: none is in this one.
        # One whose credit an enqueue is claiming with waits for that claim's delivery.
        routes.retiring = [s for s in self._retiring if not s.reserved]
        self._retiring = [s for s in self._retiring if s.reserved]
        if self.phase is not Phase.STOPPING:
            self._add_claims(batch, routes)
        return batch, routes

    def _add_claims(self, batch: WorkBatch, routes: Routes) -> None:
        """Claims for every session with credit, if a wake-up asked for them (for how
        much of it: ``claims.claim_count``)."""
        news = self.wakeups.take_claim_news()
        if news is None:
            return
        if news.heard_of_work:
            claims.hear_of_work(self.sessions, news.queues)
        # A drained session claims again when work is heard of, not merely because a
        # run ended and gave its credit back: at a light load, that would be a claim
        # (and its credit set aside) after every result.
        for session in self.turns.order([s for s in claims.with_credit(self.sessions) if not s.drained]):
            count = claims.claim_count(session, with_enqueues=bool(batch.enqueues))
            if count > 0:
                batch.claims.append(claims.reserve(session, count))
                routes.claims.append(session)

    def _launch(self, batch: WorkBatch, routes: Routes) -> asyncio.Task[None]:
        """Hands ``batch`` to the writer now, and delivers its answers once written."""
        if batch.claims:
            self._claim_launches += 1
        routes.claim_launches = self._claim_launches
        light_load = not self.pending and self.phase is Phase.SERVING
        routes.joining = self.joins.open_for(batch, routes.claims, light_load=light_load)
        pending = self.executors.submit_write(self.process, batch)
        deliver = lambda answered: self._write(answered, batch, routes)  # noqa: E731
        return self.slots.launch(pending, deliver, exclusive=routes.joining is not None)

    def _launch_next(self) -> None:
        """Under load the next batch's messages are already waiting when the writer
        answers: it gets them at once, before this loop delivers the answers and frames
        what they carry (a millisecond or more of the loop's time, in which the writer
        would sit idle). Streams retiring and a stop go through ``run`` instead, which
        waits for what is in flight first."""
        if not self.pending or self.phase is Phase.STOPPING or self._retiring or self.slots.full:
            return
        batch, routes = self._take()
        self._launch(batch, routes)

    async def _write(self, pending: asyncio.Future[BatchAnswers], batch: WorkBatch, routes: Routes) -> None:
        try:
            answers = await pending
        except Exception as failure:
            self.joins.settle(routes.joining, None, routes.claims)
            # The store failed: nothing of the batch was written. Closing the streams
            # makes their workers reconnect and resend what is unacknowledged.
            log.exception("worker batch failed; closing %d affected streams", len(routes.sessions()))
            for session in routes.sessions():
                session.close()
            answer_calls(routes.enqueues, failed=failure)
            answer_calls(routes.cancels, failed=failure)
            self._hand_back(routes.claims, batch.claims, BatchAnswers(claims=[[] for _ in batch.claims]))
            await asyncio.sleep(0.1)
        else:
            lost_early = self.joins.settle(routes.joining, answers, routes.claims)
            if routes.work_queues and routes.claim_launches != self._claim_launches:
                # A batch with claims went to the writer while this one was written
                # (PostgreSQL): they may have read before this one's enqueues committed.
                # News of them, again. (Claims of a batch already on the writer when this
                # one was taken are marked stale by its news: ``claims.hear_of_work``.)
                # Not after every overlap: a result's batch alongside made a claim round
                # of its own after most light-load enqueues on PostgreSQL, which held the
                # worker's credit when the next enqueue came.
                for queue in sorted(routes.work_queues):
                    self.wakeups.wake(Wake.WORK, queue)
            self._launch_next()
            route_answers(answers, routes, batch)
            self._hand_back(routes.claims, batch.claims, answers)
            answer_calls(routes.enqueues, answers.enqueued)
            answer_calls(routes.cancels, answers.cancelled)
            if routes.claims:
                self.claim_rounds += 1
            self.on_effects(answers)
            for session in lost_early:  # its claims went out on a try that did not commit
                session.close()  # it starts over, as after a failed batch (joined_starts)

    def _close_retired(self, routes: Routes) -> None:
        for session in routes.retiring:
            log.info(
                "worker %s: stream reached its maximum age; ending it",
                session.worker_id,
                extra={"worker_id": session.worker_id},
            )
            session.close()

    # -- management -----------------------------------------------------------------

    def cancel_attempt(self, worker_id: str, attempt_id: str, *, token_id: str | None) -> int:
        """R-8: pushes a cancel to the streams on this replica that hold the attempt (its
        worker ID with the token it was claimed with); returns how many. A worker on
        another replica hears it in its next heartbeat answer.

        The token counts: any client may name any worker ID, so a stream of another
        tenant with the same ID must not learn the attempt's ID."""
        sessions = [s for s in self.sessions if s.worker_id == worker_id and s.token_id == token_id]
        for session in sessions:
            session.deliver(CancelNotice(attempt_id, CANCEL_REASON))
        return len(sessions)

    def open_token_ids(self) -> set[str]:
        """The tokens this replica's open streams were opened with."""
        return {s.token_id for s in self.sessions if s.token_id is not None}

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
        if self.phase is Phase.SERVING:
            self.phase = Phase.DRAINING
        notice_s = timeout_s - min(self.config.drain_reserve_s, timeout_s / 2)
        for session in self.sessions:
            session.draining = True
            session.deliver(DrainNotice(notice_s))
        if self.sessions:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._no_sessions.wait(), timeout_s)
        # Let the loop write what the last results carried before it stops.
        await asyncio.sleep(self.config.batch_window_ms / 1000 + 0.05)

    def stop(self) -> None:
        """Ends the loop after the batch in hand; ``run()`` returns then."""
        self.phase = Phase.STOPPING
        self.wakeups.wake(Wake.STOP)

    def close_sessions(self) -> None:
        for session in list(self.sessions):
            session.close()
