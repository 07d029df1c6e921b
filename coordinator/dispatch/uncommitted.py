"""Claims handed out before their transaction committed, and the messages naming them.

An enqueue's transaction claims for the sessions with credit (``Dispatcher.reserve_claims``)
and then writes the rest and commits. Its claims go to their workers as soon as they are
made, not after the commit: the worker's start request, the job's next step, then
travels while the commit is written (on SQLite the commit's sync, on PostgreSQL the writes
held for the commit and the commit's own round trip), and a job waits that much less for
its handler.

A claim authorizes nothing: a handler runs only once the coordinator grants its start
(R-1), and a grant is only made from a committed claim, because a start, release or
heartbeat that names a claim whose transaction has not settled is held back here until
it has (a batch on another write connection would not see the claim yet, and would
answer it as an unknown attempt). If that transaction failed, the messages held back then
meet no attempt: the start is refused, and the worker lets the claim go and gives its
credit back. A transaction tried again after its claims went out claims nothing the
second time; its jobs are claimed by the next round instead.

At a light load the worker's start usually reaches the coordinator before the commit
would have been sent, and is written in that same transaction (``JoiningStarts``): the
claim and its start then commit together, and the grant follows the one commit, instead
of waiting for a second transaction of its own. The start is still written only once the
worker asked for it, and granted only once written, so R-1 counts it as before; a claim
whose start did not come in time takes the path above.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")

JOIN_WAIT_S = 0.002
"""How long an enqueue's transaction waits, at most, for the starts of the claims it
handed out before it commits. A worker's start takes well under a millisecond to come
back at a light load. Under load there is no wait (every batch slot of the writer is
busy, ``Dispatcher._writer_wanted``); on SQLite a batch that needs the single writer ends
the wait at once (``JoiningStarts.stop``). A start that misses it costs only its own
transaction, as before."""


class UncommittedClaims:
    """The attempts handed out before their commit, and the messages held back for them."""

    __slots__ = ("_attempt_ids", "_held_back")

    def __init__(self) -> None:
        self._attempt_ids: set[str] = set()
        self._held_back: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def __contains__(self, attempt_id: object) -> bool:
        return attempt_id in self._attempt_ids

    @property
    def held_back(self) -> int:
        """How many messages wait for a commit."""
        return len(self._held_back)

    def add(self, attempt_ids: Iterable[str]) -> None:
        self._attempt_ids.update(attempt_ids)

    def hold_back(self, attempt_ids: Iterable[str], replay: Callable[..., None], *args: Any) -> bool:
        """True, and ``replay(*args)`` kept for ``settle``, when a message names any of
        these attempts; False when it may go on now. (The call is kept as its parts, so
        the messages that go on at once, nearly all of them, build nothing.)"""
        if not self._attempt_ids or self._attempt_ids.isdisjoint(attempt_ids):
            return False
        self._held_back.append((replay, args))
        return True

    def settle(
        self,
        attempt_ids: Iterable[str],
        first: Iterable[tuple[Callable[..., None], tuple[Any, ...]]] = (),
    ) -> None:
        """Their transaction committed or failed: the messages held back go on, in the
        order they came (one naming another transaction's claims is held back again),
        after ``first`` (starts a failed transaction had taken, which came before them)."""
        self._attempt_ids.difference_update(attempt_ids)
        held_back, self._held_back = [*first, *self._held_back], []
        for replay, args in held_back:
            replay(*args)


class JoiningStarts(Generic[Item]):
    """The starts of one transaction's claims that arrive while it waits for them, to be
    written in it. Offered on the event loop, gathered on the writer (thread-safe)."""

    __slots__ = ("_arrived", "_expected", "_open", "taken")

    def __init__(self, attempt_ids: Iterable[str]) -> None:
        self._expected = set(attempt_ids)
        self._arrived = threading.Condition()
        self._open = True
        self.taken: list[Item] = []
        """The starts taken, in arrival order."""

    def offer(self, attempt_id: str, start: Item) -> bool:
        """True when the transaction takes this start; False when it goes the usual way
        (the transaction stopped waiting, or the attempt is not one of its own)."""
        with self._arrived:
            if not self._open or attempt_id not in self._expected:
                return False
            self._expected.discard(attempt_id)
            self.taken.append(start)
            if not self._expected:
                self._arrived.notify()
            return True

    def stop(self) -> None:
        """Ends the wait now: the writer is wanted for other work."""
        with self._arrived:
            self._open = False
            self._arrived.notify()

    def gather(self, timeout_s: float | None = None) -> list[Item]:
        """Waits until every expected start came, ``stop`` or ``timeout_s`` (default
        ``JOIN_WAIT_S``); then takes no more. Returns the starts taken."""
        with self._arrived:
            wait_s = JOIN_WAIT_S if timeout_s is None else timeout_s
            self._arrived.wait_for(lambda: not (self._open and self._expected), wait_s)
            self._open = False
            return list(self.taken)
