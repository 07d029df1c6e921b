"""PostgreSQL notifications name the store that sent them, and a replica's listener
skips its own: the replica that wrote has woken its own dispatcher already, and a
second claim round for the same jobs would only find them taken. (SQLite has one
coordinator process and sends none.)"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from coordinator.store import Store, Tx
from coordinator.store.notify import listen_for_jobs

pytestmark = pytest.mark.postgres


def _notify(tx: Tx) -> None:
    tx.notify_jobs_available()


class _Heard(list[str | None]):
    """What a listener heard, in order; ``until`` waits for one origin among it."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    def hear(self, origin: str | None) -> None:
        self.append(origin)
        self._changed.set()

    async def until(self, origin: str) -> None:
        async with asyncio.timeout(10):
            while origin not in self:
                self._changed.clear()
                await self._changed.wait()


async def test_a_listener_hears_other_stores_and_not_its_own(postgres_url: str) -> None:
    mine, other = Store.open(postgres_url), Store.open(postgres_url)
    assert mine.origin != other.origin
    heard = _Heard()
    listening = asyncio.Event()
    listener = asyncio.create_task(
        listen_for_jobs(
            postgres_url, heard.hear, lambda up: listening.set() if up else None, own_origin=mine.origin
        )
    )
    try:
        await asyncio.wait_for(listening.wait(), 10)
        for _ in range(3):
            await asyncio.to_thread(mine.transact, _notify, what="a test")
        await asyncio.to_thread(other.transact, _notify, what="a test")
        # Notifications reach a listener in commit order: once the other store's is
        # heard, this store's three (committed before it) have arrived and been skipped.
        await heard.until(other.origin)
        assert heard == [None, other.origin]  # None: the call after connecting
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        mine.close()
        other.close()


async def test_without_an_origin_of_its_own_a_listener_hears_every_store(postgres_url: str) -> None:
    store = Store.open(postgres_url)
    heard = _Heard()
    listening = asyncio.Event()
    listener = asyncio.create_task(
        listen_for_jobs(postgres_url, heard.hear, lambda up: listening.set() if up else None)
    )
    try:
        await asyncio.wait_for(listening.wait(), 10)
        await asyncio.to_thread(store.transact, _notify, what="a test")
        await heard.until(store.origin)
        assert heard == [None, store.origin]
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
        store.close()
