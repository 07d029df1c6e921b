"""The hot path: worker sessions, credit, and the batch loop that pushes work.

Stream readers hand every message to the dispatcher; one loop gathers what arrived in
the batch window, carries it out in one transaction (``service.batch.WorkerOps.process``) together
with claims for every session that has credit, and routes the answers back to each
session's outbox. Jobs are pushed as soon as a wake-up says work may be there: an
enqueue, a result, a release, a lease recovery or a due retry (no polling interval on
the hot path; an idle re-check covers other replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import heartbeats
from coordinator.dispatch.deliveries import CancelNotice, DrainNotice, WorkerHello
from coordinator.dispatch.sessions import WorkerSession
from coordinator.domain.bounds import STREAM_BOUNDS, StreamBounds
from coordinator.domain.clock import Clock
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors
from coordinator.service.work import (
    NO_PROGRESS,
    AttemptMessage,
    BatchAnswers,
    ClaimRequest,
    HeartbeatRequest,
    ResultReport,
    WorkBatch,
)

log = logging.getLogger(__name__)

CANCEL_REASON = "cancelled by request"

ProcessBatch = Callable[[WorkBatch], BatchAnswers]


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
    lost_unread: list[set[str]] = field(default_factory=list)
    """For each heartbeat, the attempts answered lost without a store look-up
    (``dispatch.heartbeats``)."""

    def sessions(self) -> set[WorkerSession]:
        return {*self.starts, *self.heartbeats, *self.results, *self.claims, *self.releases}


@dataclass(slots=True)
class ReservedClaims:
    """Claims set aside for an enqueue's transaction: one request per session."""

    sessions: list[WorkerSession]
    requests: list[ClaimRequest]
    were_drained: list[bool] | None = None
    """Each session's ``drained`` before the claims were made: a claim of some of its
    queues only says nothing about the others."""


def _reserve(session: WorkerSession, only: AbstractSet[str] | None = None) -> ClaimRequest:
    """A claim for all of ``session``'s credit (from those of its queues in ``only``, if
    given), which is set aside (``reserved``) until the claim is handed out
    (``Dispatcher._hand_out``)."""
    queues = session.queues if only is None else tuple(q for q in session.queues if q in only)
    request = ClaimRequest(
        session.worker_id,
        queues,
        session.wire_names,
        session.credit,
        session.lease_ms,
        token_id=session.token_id,
        token_queues=session.token_queues,
    )
    session.reserved += session.credit
    session.credit = 0
    return request


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
        ``batches_in_flight``: how many batches may be written at once (1 on SQLite,
        whose single writer would only queue them; more where the writer has several
        connections, so the next batch does not wait out the round trips of the one
        before)."""
        if batches_in_flight < 1:
            raise ValueError(f"batches_in_flight must be 1 or more, got {batches_in_flight}")
        self.batches_in_flight = batches_in_flight
        self._in_flight: set[asyncio.Task[None]] = set()
        """Batches handed to the writer whose answers are not delivered yet."""
        self._writing = 0
        """Of those, the ones the writer has not answered yet: a slot frees when the
        writer answers, before the answers are delivered."""
        self._slot_freed = asyncio.Event()
        self.process = process
        self.config = config
        self.clock = clock
        self.executors = executors
        self.on_effects = on_effects
        self.on_sessions_changed = on_sessions_changed
        self.sessions: set[WorkerSession] = set()
        self.stream_bounds = stream_bounds
        self._batch = WorkBatch()
        self._routes = _Routes()
        self._batch_items = 0
        """Starts, results, releases and heartbeats in ``_batch``: bounded by
        ``stream_bounds.max_pending_batch_items`` (readers wait past it)."""
        self._heartbeat_at: dict[WorkerSession, int] = {}
        """Where each session's heartbeat is in ``_batch.heartbeats``: one a session sends
        before that is written takes its place (only the latest set of attempts matters)."""
        self._wake = asyncio.Event()
        self._claim_needed = True
        self._work_arrived = False
        """Jobs may have become claimable since the last claims were taken (not merely
        credit arrived): claims out in flight then may have read too early."""
        self._work_in: set[str] | None = set()
        """The queues work was heard of in since the last claims were taken (None: any
        queue, e.g. another replica's or a retry's): only the sessions taking from them
        need to claim again (``_heard_of_work``)."""
        self._next_due_ms: int | None = None
        self._stopping = False
        self.draining = False
        self.claim_rounds = 0
        """Batches written that carried claims (tests wait on it; metrics can export it)."""
        self._idle = asyncio.Event()
        self._retiring: list[WorkerSession] = []
        self._hears_all = False
        """Every write that makes jobs claimable wakes this dispatcher (``hears_all``)."""
        self._turns = 0
        """Claim rounds so far: each round's claims start with the next session in turn
        (``_in_turn``)."""

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
        )
        self.sessions.add(session)
        self._idle.clear()
        self.on_sessions_changed(self.sessions)
        return session

    def close(self, session: WorkerSession) -> None:
        """The stream ended. Its leases stay: they lapse unless the worker reconnects
        and heartbeats them (R-4/R-5 decide what a lapse costs)."""
        self.sessions.discard(session)
        if not self.sessions:
            self._idle.set()
        self.on_sessions_changed(self.sessions)

    def add_credit(self, session: WorkerSession, count: int) -> None:
        session.credit = min(session.credit + max(count, 0), session.capacity - session.reserved)
        self._claim_needed = True
        self._wake.set()

    def start(self, session: WorkerSession, attempt_id: str) -> None:
        self._batch.starts.append(AttemptMessage(attempt_id, session.identity))
        self._routes.starts.append(session)
        self._batch_items += 1
        self._wake.set()

    def heartbeat(
        self,
        session: WorkerSession,
        attempt_ids: Sequence[str],
        lease_ms: int,
        progress: Mapping[str, str] = NO_PROGRESS,
    ) -> None:
        request = HeartbeatRequest(attempt_ids, lease_ms, session.identity, progress)
        at = self._heartbeat_at.get(session)
        if at is not None:
            # The worker holds what it names now: the earlier heartbeat is answered by
            # this one's answer, and costs nothing more. Its progress reports still
            # count where this one has none newer (a worker sends only changes).
            earlier = self._batch.heartbeats[at].progress
            if earlier:
                request = HeartbeatRequest(attempt_ids, lease_ms, session.identity, {**earlier, **progress})
            self._batch.heartbeats[at] = request
            session.give_back(1)
            return
        self._heartbeat_at[session] = len(self._batch.heartbeats)
        self._batch.heartbeats.append(request)
        self._routes.heartbeats.append(session)
        self._batch_items += 1
        self._wake.set()

    def result(self, session: WorkerSession, report: ResultReport) -> None:
        self._batch.results.append(
            ResultReport(report.attempt_id, report.report, report.output, session.identity)
        )
        self._routes.results.append(session)
        self._batch_items += 1
        self._wake.set()

    def batch_full(self) -> bool:
        """Whether the batch waiting for the writer is at its bound, or the loop is
        stopping: readers wait. (While stopping, what was taken in is written and the
        streams close; a client sending without end cannot keep the loop going.)"""
        return self._stopping or self._batch_items >= self.stream_bounds.max_pending_batch_items

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
        self._batch.releases.append(AttemptMessage(attempt_id, session.identity))
        self._routes.releases.append(session)
        self._batch_items += 1
        self._wake.set()

    # -- called when jobs may have become claimable --------------------------------

    def jobs_available(self, run_at_ms: int | None = None, queue: str | None = None) -> None:
        """A new or recovered job exists (in ``queue``; None: in any); ``run_at_ms`` when
        it only becomes due later."""
        if run_at_ms is not None and run_at_ms > self.clock.now_ms():
            self._note_due(run_at_ms)
            return
        if queue is None:
            self._work_in = None
        elif self._work_in is not None:
            self._work_in.add(queue)
        self._claim_needed = self._work_arrived = True
        self._wake.set()

    def hears_all(self, hearing: bool) -> None:
        """Whether every write that makes jobs claimable reaches ``jobs_available``: this
        process's own always do; another replica's through PostgreSQL's LISTEN, while
        its connection is up. While they do, idle sessions re-check only rarely."""
        self._hears_all = hearing

    def absorb(self, effects: Effects) -> None:
        """Wakes for what a batch, an operator action or a maintenance pass changed."""
        if effects.available_changed:
            self.jobs_available()
        if effects.next_run_at_ms is not None:
            self._note_due(effects.next_run_at_ms)

    def _note_due(self, run_at_ms: int) -> None:
        if self._next_due_ms is None or run_at_ms < self._next_due_ms:
            self._next_due_ms = run_at_ms
            self._wake.set()

    # -- claims made by an enqueue's own transaction ------------------------------------

    def reserve_claims(self, queues: Iterable[str] | None = None) -> ReservedClaims | None:
        """The claims of every session with credit that takes from ``queues`` (those the
        enqueue makes work in; None: any), that credit set aside, for an enqueue to make
        in its own transaction: its jobs then go out with its commit instead of one
        wake-up and one transaction later. Each claim reads only those of its queues: the
        enqueue's cost does not grow with other sessions' queues. None when no session
        has credit. Every reservation must end in ``settle_claims``, whatever happened."""
        if self._stopping or self.draining:
            return None
        wanted = None if queues is None else frozenset(queues)
        sessions = self._with_credit()
        if wanted is not None:
            sessions = [s for s in sessions if not wanted.isdisjoint(s.queues)]
        sessions = self._in_turn(sessions)
        were_drained = [s.drained for s in sessions]  # before this news clears it
        self._heard_of_work(wanted)
        if not sessions:
            return None
        requests = [_reserve(s, wanted) for s in sessions]
        return ReservedClaims(sessions, requests, were_drained=were_drained)

    def settle_claims(self, reserved: ReservedClaims, answers: BatchAnswers | None) -> None:
        """Hands out what the enqueue claimed, once its transaction committed (``answers``:
        its claims, one list per request; None when the transaction failed), and gives
        back the credit it did not use."""
        if answers is None:
            answers = BatchAnswers(claims=[[] for _ in reserved.requests])
            self._claim_needed = True  # nothing was claimed: the loop tries again
            self._wake.set()
        self._hand_out(reserved.sessions, reserved.requests, answers, were_drained=reserved.were_drained)
        if any(session in self._retiring for session in reserved.sessions):
            self._wake.set()  # a stream that waited for this delivery to end can end now

    def _hand_out(
        self,
        sessions: list[WorkerSession],
        requests: list[ClaimRequest],
        answers: BatchAnswers,
        *,
        were_drained: list[bool] | None = None,
    ) -> None:
        """Delivers claims made for reserved credit and gives back the credit not used.
        A session whose claim took all it could (all it asked for, or ``max_claim_batch``,
        the most one claim takes) and that has credit left or again may find more: another
        round, at once; so does one that work may have become claimable for while its claim
        was out (``claim_may_be_stale``). (Credit that arrived meanwhile asked for a round
        of its own.)"""
        refill = False
        bounds = self.config.bounds
        drained = answers.drained or [False] * len(requests)
        for at, (session, request, claimed, empty) in enumerate(
            zip(sessions, requests, answers.claims, drained, strict=True)
        ):
            session.reserved -= request.count
            session.credit += request.count - len(claimed)
            if claimed and session in self.sessions:
                session.assign(tuple(claimed))
            took_all_it_could = len(claimed) == bounds.clamp_claim_batch(request.count)
            missed_work = session.claim_may_be_stale
            session.claim_may_be_stale = False
            # A claim of some of its queues only leaves its other queues as they were.
            partial = were_drained is not None and len(request.queues) < len(session.queues)
            others_empty = were_drained[at] if were_drained is not None and partial else True
            session.drained = empty and others_empty and not missed_work
            refill = refill or ((took_all_it_could or missed_work) and session.credit > 0)
        if refill:
            self._claim_needed = True
            self._wake.set()

    # -- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        """Runs batches until ``stop()``; the batch pending then is still written, and
        every batch in flight."""
        try:
            while True:
                await self._sleep_until_woken()
                if self.config.batch_window_ms > 0 and not self._stopping:
                    await asyncio.sleep(self.config.batch_window_ms / 1000)
                else:
                    await asyncio.sleep(0)  # the other streams' messages read in the same wake-up
                # A slot first: what arrives meanwhile joins the batch taken next.
                while self._writing >= self.batches_in_flight:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                batch, routes = self._take()
                if routes.retiring or self._stopping:
                    # A stream ends only after everything written for it was delivered.
                    await self._settle_in_flight()
                if batch:
                    written = self._launch(batch, routes)
                    if routes.retiring:
                        await asyncio.wait({written})
                self._close_retired(routes)
                if self._stopping and not self._batch:
                    return
        finally:
            await self._settle_in_flight()

    def _launch(self, batch: WorkBatch, routes: _Routes) -> asyncio.Task[None]:
        """Hands ``batch`` to the writer now, and delivers its answers once written."""
        self._writing += 1
        pending = self.executors.submit_write(self.process, batch)
        # Registered before ``_write`` awaits it, so it runs first: the slot is free by
        # the time ``_write`` looks for the next batch, whatever the batch's outcome.
        pending.add_done_callback(self._writer_answered)
        written = asyncio.create_task(self._write(pending, batch, routes))
        self._in_flight.add(written)
        written.add_done_callback(self._in_flight.discard)
        return written

    def _writer_answered(self, _: asyncio.Future[BatchAnswers]) -> None:
        self._writing -= 1
        self._slot_freed.set()

    def _launch_next(self) -> None:
        """Under load the next batch's messages are already waiting when the writer
        answers: it gets them at once, before this loop delivers the answers and frames
        what they carry (a millisecond or more of the loop's time, in which the writer
        would sit idle). Streams retiring and a stop go through ``run`` instead, which
        waits for what is in flight first."""
        if not self._batch or self._stopping or self._retiring or self._writing >= self.batches_in_flight:
            return
        batch, routes = self._take()
        self._launch(batch, routes)

    async def _write(self, pending: asyncio.Future[BatchAnswers], batch: WorkBatch, routes: _Routes) -> None:
        try:
            answers = await pending
        except Exception:
            # The store failed: nothing of the batch was written. Closing the streams
            # makes their workers reconnect and resend what is unacknowledged.
            log.exception("worker batch failed; closing %d affected streams", len(routes.sessions()))
            for session in routes.sessions():
                session.close()
            self._hand_out(routes.claims, batch.claims, BatchAnswers(claims=[[] for _ in batch.claims]))
            await asyncio.sleep(0.1)
        else:
            self._launch_next()
            self._deliver(answers, routes, batch)

    async def _settle_in_flight(self) -> None:
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))

    def _close_retired(self, routes: _Routes) -> None:
        for session in routes.retiring:
            log.info(
                "worker %s: stream reached its maximum age; ending it",
                session.worker_id,
                extra={"worker_id": session.worker_id},
            )
            session.close()

    async def _sleep_until_woken(self) -> None:
        timeout = self.config.idle_interval_s if self._hears_all else self.config.idle_recheck_interval_s
        if self._next_due_ms is not None:
            timeout = min(timeout, max(self._next_due_ms - self.clock.now_ms(), 0) / 1000)
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            # Idle re-check: another replica may have added work.
            self._claim_needed = self._work_arrived = True
            self._work_in = None
        self._wake.clear()
        if self._next_due_ms is not None and self._next_due_ms <= self.clock.now_ms():
            self._next_due_ms = None
            self._claim_needed = self._work_arrived = True
            self._work_in = None

    def _take(self) -> tuple[WorkBatch, _Routes]:
        batch, routes = self._batch, self._routes
        was_full = self._batch_items >= self.stream_bounds.max_pending_batch_items
        self._batch, self._routes = WorkBatch(), _Routes()
        self._batch_items = 0
        self._heartbeat_at = {}
        if was_full:
            for session in self.sessions:
                session.make_room()
        if batch.heartbeats:
            routes.lost_unread = heartbeats.screen(routes.heartbeats, batch.heartbeats)
        # Claims for these were taken, if at all, by the batch before: none is in this one.
        # One whose credit an enqueue is claiming with waits for that claim's delivery.
        routes.retiring = [s for s in self._retiring if not s.reserved]
        self._retiring = [s for s in self._retiring if s.reserved]
        if self._claim_needed and not self._stopping:
            self._claim_needed = False
            if self._work_arrived:
                self._work_arrived = False
                self._heard_of_work(self._work_in)
                self._work_in = set()
            # A drained session claims again when work is heard of, not merely because a
            # run ended and gave its credit back: at a light load, that would be a claim
            # (and its credit set aside) after every result.
            for session in self._in_turn([s for s in self._with_credit() if not s.drained]):
                # Set aside until delivered: an enqueue's claims must not spend it too.
                batch.claims.append(_reserve(session))
                routes.claims.append(session)
        return batch, routes

    def _with_credit(self) -> list[WorkerSession]:
        """The sessions a claim may be made for: credit left, not draining, wire names to
        ask for."""
        return [s for s in self.sessions if s.credit > 0 and not s.draining and s.wire_names]

    def _in_turn(self, sessions: list[WorkerSession]) -> list[WorkerSession]:
        """``sessions`` starting with the next one in turn. A round's claims take jobs in
        the order of their requests, so without turns the same session would get every
        job of a light load while the others wait: all of it on one worker process."""
        if len(sessions) < 2:
            return sessions
        first = self._turns % len(sessions)
        self._turns += 1
        return sessions[first:] + sessions[:first]

    def _heard_of_work(self, queues: AbstractSet[str] | None = None) -> None:
        """Jobs may have become claimable (in ``queues``; None: anywhere): every session
        taking from them may claim again, and one whose claim is out may have read before
        that work committed (PostgreSQL writes batches and enqueues at once), so it
        claims again once the credit is back."""
        for session in self.sessions:
            if queues is not None and queues.isdisjoint(session.queues):
                continue
            session.drained = False
            if session.reserved:
                session.claim_may_be_stale = True

    def _deliver(self, answers: BatchAnswers, routes: _Routes, batch: WorkBatch) -> None:
        for session, start in zip(routes.starts, answers.starts, strict=True):
            session.deliver(start)
        beats = zip(routes.heartbeats, batch.heartbeats, answers.heartbeats, routes.lost_unread, strict=True)
        for session, request, heartbeat, unread in beats:
            session.deliver(heartbeats.answered(session, request, heartbeat, unread))
            for attempt_id in sorted(heartbeat.cancels):  # repeated until the run ends
                session.deliver(CancelNotice(attempt_id, CANCEL_REASON))
        for session, result in zip(routes.results, answers.results, strict=True):
            if result.error is None:  # accepted or stale: the attempt is held no more
                session.held.discard(result.attempt_id)
            session.deliver(result)
        for session in routes.releases:
            session.give_back(1)  # written; releases have no answer
        if routes.claims:
            self.claim_rounds += 1
        self.on_effects(answers)
        self._hand_out(routes.claims, batch.claims, answers)

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
        self.draining = True
        notice_s = timeout_s - min(self.config.drain_reserve_s, timeout_s / 2)
        for session in self.sessions:
            session.draining = True
            session.deliver(DrainNotice(notice_s))
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
