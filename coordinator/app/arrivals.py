"""A signal that jobs may have become claimable: an enqueue on this replica, another
replica's notification (PostgreSQL LISTEN), a queue resumed. Scaler streams
(``api.scaler``) wait on it rather than reading the database in a tight loop."""

from __future__ import annotations

import asyncio
import contextlib


class Arrivals:
    """Waiters take a ``ticket`` before they read, then ``wait`` on it: a signal that
    comes between their read and their wait still wakes them."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def ticket(self) -> asyncio.Event:
        return self._event

    def signal(self) -> None:
        """Wakes every waiter holding a ticket taken before now."""
        fired, self._event = self._event, asyncio.Event()
        fired.set()

    @staticmethod
    async def wait(ticket: asyncio.Event, timeout_s: float) -> None:
        """Returns once the ticket's signal has come, or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ticket.wait(), timeout_s)
