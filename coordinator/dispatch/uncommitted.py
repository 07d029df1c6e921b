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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


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

    def settle(self, attempt_ids: Iterable[str]) -> None:
        """Their transaction committed or failed: the messages held back go on, in the
        order they came (one naming another transaction's claims is held back again)."""
        self._attempt_ids.difference_update(attempt_ids)
        held_back, self._held_back = self._held_back, []
        for replay, args in held_back:
            replay(*args)
