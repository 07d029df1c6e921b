"""The database clock (R-13): with PostgreSQL every replica reads time as the database
tells it, through an offset to its own clock refreshed every so often."""

from __future__ import annotations

import asyncio

from coordinator.domain.clock import OffsetClock, offset_from_samples
from coordinator.scheduler.loop import every
from coordinator.service.executors import Executors
from coordinator.store import Store

CLOCK_SAMPLES = 5
"""Readings of the database clock per measure: the one with the shortest round trip
counts, so one delayed reading (a descheduled thread) does not move the offset."""


def database_offset_ms(store: Store) -> int:
    """How far the database's clock is ahead of ours (0 on SQLite)."""
    samples = store.database_clock_samples(CLOCK_SAMPLES)
    return offset_from_samples(samples) if samples else 0


class DatabaseClock:
    def __init__(self, store: Store, clock: OffsetClock, executors: Executors, interval_s: float) -> None:
        self.store = store
        self.clock = clock
        self.executors = executors
        self.interval_s = interval_s

    async def run_once(self) -> None:
        self.clock.offset_ms = await self.executors.read(database_offset_ms, self.store)

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, stop, self.run_once, "database clock refresh")
