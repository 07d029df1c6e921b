"""The writer's slots: how many worker batches may be written at once, and the batches
handed to the writer whose answers are not delivered yet.

A slot is taken when a batch goes to the writer and freed as soon as the writer
answers, before the answers are delivered: under load the next batch then goes to the
writer while this one's answers are still being routed. Delivery finishes in a task of
its own; ``settle`` waits for every such task (a stream ends, or the loop stops, only
after everything written for it was delivered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class WriterSlots:
    """``capacity`` batches written at once (1 on SQLite, whose single writer would only
    queue them; more where the writer has several connections, so the next batch does
    not wait out the round trips of the one before)."""

    __slots__ = ("_freed", "_in_flight", "capacity", "writing")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"batches_in_flight must be 1 or more, got {capacity}")
        self.capacity = capacity
        self.writing = 0
        """Batches the writer has not answered yet."""
        self._in_flight: set[asyncio.Task[None]] = set()
        """Batches handed to the writer whose answers are not delivered yet."""
        self._freed = asyncio.Event()

    @property
    def full(self) -> bool:
        return self.writing >= self.capacity

    async def wait_for_one(self) -> None:
        """Returns once a slot is free."""
        while self.full:
            self._freed.clear()
            await self._freed.wait()

    def launch(
        self,
        pending: asyncio.Future[T],
        deliver: Callable[[asyncio.Future[T]], Coroutine[Any, Any, None]],
        *,
        exclusive: bool = False,
    ) -> asyncio.Task[None]:
        """Takes a slot for ``pending`` (the writer's answer to come), or every slot when
        ``exclusive`` (no other batch goes to the writer until it is answered; one already
        there may finish), and runs ``deliver(pending)`` in a task of its own, which
        ``settle`` waits for."""
        taken = self.capacity if exclusive else 1
        self.writing += taken
        # Registered before ``deliver`` awaits it, so it runs first: the slot is free by
        # the time ``deliver`` looks for the next batch, whatever the batch's outcome.
        pending.add_done_callback(lambda _: self._answered(taken))
        written = asyncio.create_task(deliver(pending))
        self._in_flight.add(written)
        written.add_done_callback(self._in_flight.discard)
        return written

    def _answered(self, taken: int) -> None:
        self.writing -= taken
        self._freed.set()

    async def settle(self) -> None:
        """Waits until every batch in flight has been delivered."""
        while self._in_flight:
            await asyncio.wait(set(self._in_flight))
