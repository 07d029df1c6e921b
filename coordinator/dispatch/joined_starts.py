"""An enqueue's claims handed out before their commit, and their starts written in it.

At a light load a job's path is two transactions: the enqueue's (which claims it for a
waiting worker) and its start's. Here the enqueue's transaction, once it has written its
claims, hands them to their workers at once and waits a moment (2 ms by default) for the
starts they answer with; the starts that come in time are written in that same
transaction, and the grant follows its one commit. The worker's round trip then overlaps
the transaction instead of following it, and the second transaction is gone.

What stays true (docs/durability.md):

- **R-1.** A start is written only once its worker asked for it, and granted only once
  written and committed, as on the usual path. A claim authorizes nothing.
- **A claim handed out before its commit can be lost** (the transaction fails, or is run
  again: ``Store.transact``). Its worker then holds an assignment for an attempt that
  never existed: its start is refused as unknown. The credit the dispatcher counted for
  that stream no longer matches the worker's, so the dispatcher closes the stream, as it
  does after any failed batch; the worker reconnects and says its credit again. A
  transaction run again hands nothing out early: its claims go out after its commit.
- **No other batch sees a claim before its commit.** The batch that hands claims out
  early holds every writer slot (``WriterSlots.launch(exclusive=True)``), so a start,
  release or heartbeat that misses the wait is written by a later batch, after the
  commit. (On SQLite there is one slot anyway.)
- **Nothing else waits on it.** Only a batch with enqueue calls and claims, taken while
  nothing else was pending, waits; any wake-up of the loop (a message, an enqueue, a
  stop) ends the wait at once, and so does the last expected start. (A batch already on
  the writer may go on: it was taken before these claims existed, so it names none of
  them. Requiring an idle writer too left two thirds of PostgreSQL's light-load
  enqueues without a join, where a result's batch was still being written.)

Whether this pays is measured, not assumed: ``CoordinatorConfig.join_start_wait_ms``
sets the wait, and 0 turns it off (benchmarks/LOG.md, 2026-12-07). At a light load a
worker's start comes back in about a millisecond.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet

from coordinator.dispatch.sessions import WorkerSession
from coordinator.service.work import AttemptMessage, BatchAnswers, Claimed, WorkBatch


class JoinedStarts:
    """One batch's early hand-out and the starts that join it.

    ``hand_out`` and ``gather`` run on the writer's thread; ``offer`` and ``stop`` on the
    event loop. The condition guards what both sides touch."""

    __slots__ = (
        "_arrived",
        "_deliver",
        "_expected",
        "_handed",
        "_loop",
        "_open",
        "_wait_s",
        "sessions",
        "taken",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        deliver: Callable[[Sequence[Sequence[Claimed]]], None],
        *,
        wait_s: float,
    ) -> None:
        """``deliver(claims)`` hands each claim's jobs to its session (on the loop);
        ``gather`` waits ``wait_s`` at most."""
        self._loop = loop
        self._wait_s = wait_s
        self._deliver = deliver
        self._arrived = threading.Condition()
        self._expected: set[str] = set()
        self._open = True
        self._handed = False
        self.taken: list[AttemptMessage] = []
        """The starts the transaction took, in arrival order."""
        self.sessions: list[WorkerSession] = []
        """The session each of ``taken`` came on."""

    @property
    def handed_out(self) -> bool:
        """Whether claims went out before the commit (at most once: on the first try)."""
        return self._handed

    def hand_out(self, claims: Sequence[Sequence[Claimed]]) -> bool:
        """Writer side: sends ``claims`` (one list per claim request) to their workers now.
        True when it did; False on a transaction's second try, or once stopped."""
        with self._arrived:
            if self._handed or not self._open:
                return False
            self._handed = True
            self._expected = {claimed.attempt_id for found in claims for claimed in found}
        self._loop.call_soon_threadsafe(self._deliver, claims)
        return True

    def gather(self) -> list[AttemptMessage]:
        """Writer side: waits until every claim handed out has its start, ``stop``, or
        the wait it was made with is over; then takes no more. Returns every start taken
        (a second try gets them again: they name attempts it never made, and are
        refused)."""
        with self._arrived:
            if self._handed:
                self._arrived.wait_for(lambda: not (self._open and self._expected), self._wait_s)
            self._open = False
            return list(self.taken)

    def offer(self, session: WorkerSession, attempt_id: str) -> bool:
        """Loop side: True when the transaction takes this start; False when it goes the
        usual way (not one of its claims, or the wait is over)."""
        with self._arrived:
            if not self._open or attempt_id not in self._expected:
                return False
            self._expected.discard(attempt_id)
            self.taken.append(AttemptMessage(attempt_id, session.identity))
            self.sessions.append(session)
            if not self._expected:
                self._arrived.notify()
            return True

    def stop(self) -> None:
        """Loop side: ends the wait now (the loop has other work for the writer)."""
        with self._arrived:
            if self._open:
                self._open = False
                self._arrived.notify()


class StartJoins:
    """The dispatcher's side: which batch hands its claims out early, and the one whose
    transaction waits for its starts now (at most one: it holds every writer slot)."""

    __slots__ = ("_connected", "_waiting", "starts_joined", "wait_s")

    def __init__(self, connected: AbstractSet[WorkerSession], *, wait_s: float) -> None:
        """``connected``: the dispatcher's live set of sessions (an early hand-out skips
        a stream that has gone); ``wait_s``: how long a transaction waits for its starts
        (0: claims go out after the commit)."""
        self._connected = connected
        self._waiting: JoinedStarts | None = None
        self.wait_s = wait_s
        self.starts_joined = 0
        """Starts granted in their claim's transaction so far (tests read it)."""

    def open_for(
        self, batch: WorkBatch, sessions: Sequence[WorkerSession], *, light_load: bool
    ) -> JoinedStarts | None:
        """Gives ``batch`` (whose claims are for ``sessions``) an early hand-out when it
        is an enqueue's batch with claims and the writer has nothing else to take
        (``light_load``: nothing pending, serving). The batch must then take every
        writer slot."""
        if not (self.wait_s > 0 and light_load and batch.enqueues and batch.claims):
            return None
        claimants = list(sessions)
        loop = asyncio.get_running_loop()
        joining = JoinedStarts(loop, lambda claims: self._hand_out(claimants, claims), wait_s=self.wait_s)
        batch.joining = self._waiting = joining
        return joining

    def _hand_out(self, sessions: list[WorkerSession], claims: Sequence[Sequence[Claimed]]) -> None:
        for session, claimed in zip(sessions, claims, strict=True):
            if claimed and session in self._connected:
                session.assign(tuple(claimed))

    def offer(self, session: WorkerSession, attempt_id: str) -> bool:
        """A start from ``session``: True when the waiting transaction takes it."""
        waiting = self._waiting
        return waiting is not None and waiting.offer(session, attempt_id)

    def end_wait(self) -> None:
        """The loop has other work for the writer: the transaction stops waiting."""
        if self._waiting is not None:
            self._waiting.stop()

    def settle(
        self, joining: JoinedStarts | None, answers: BatchAnswers | None, sessions: Sequence[WorkerSession]
    ) -> list[WorkerSession]:
        """A batch was answered (``answers``; None: it failed), with ``joining`` its
        early hand-out if it had one, for ``sessions``. Returns the streams to close
        because their claims went out on a try that did not commit (a failed batch
        closes its streams anyway)."""
        if joining is None:
            return []
        joining.stop()
        if self._waiting is joining:
            self._waiting = None
        if answers is not None:
            self.starts_joined += sum(1 for answer in answers.joined_starts if answer.granted)
        if answers is not None and joining.handed_out and not answers.handed_out_early:
            return list(sessions)
        return []
