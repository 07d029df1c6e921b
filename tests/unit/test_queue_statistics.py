"""The queue-statistics check: what it hands on is never older than the call that asked
for it, and a hanging check is a failure that starts no second one."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

from coordinator.domain.clock import FakeClock
from coordinator.domain.records import QueueRecord, QueueStats
from coordinator.domain.states import JobState
from coordinator.scheduler.stats import QueueStatistics

TIMEOUT_S = 5.0


class GatedStore:
    """A store whose reads of the queue statistics wait for a gate each, and count: the
    n-th read finds n jobs available."""

    def __init__(self, gated_reads: int, fail_first: bool = False) -> None:
        self.reads = 0
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gated_reads = gated_reads
        self.fail_first = fail_first

    def queue_stats(self, now_ms: int) -> list[QueueStats]:
        self.reads += 1
        number = self.reads
        if number <= self.gated_reads:
            self.entered.set()
            self.gate.wait(TIMEOUT_S * 2)
        if number == 1 and self.fail_first:
            raise ConnectionError("the database went away")
        return [QueueStats(QueueRecord("q"), {JobState.AVAILABLE: number}, None)]


class Handed:
    def __init__(self) -> None:
        self.depths: list[int] = []
        self.checked: list[bool] = []

    def on_stats(
        self,
        depths: Mapping[tuple[str, str], int],
        oldest: Mapping[str, int],
        at: int,
        paused: frozenset[str],
        held: Mapping[tuple[str, str], int],
        runnable: Mapping[str, int],
    ) -> None:
        self.depths.append(depths[("q", JobState.AVAILABLE.value)])

    async def on_checked(self, ok: bool) -> None:
        self.checked.append(ok)


def statistics(store: GatedStore, handed: Handed, timeout_s: float = TIMEOUT_S) -> QueueStatistics:
    return QueueStatistics(
        store,  # type: ignore[arg-type]  # only queue_stats is read
        FakeClock(),
        interval_s=1.0,
        timeout_s=timeout_s,
        on_stats=handed.on_stats,
        on_checked=handed.on_checked,
    )


async def test_a_check_asked_for_while_one_is_in_flight_reads_again_after_it() -> None:
    store, handed = GatedStore(gated_reads=1), Handed()
    stats = statistics(store, handed)
    try:
        loops = asyncio.ensure_future(stats.run_once())  # the background loop's pass
        assert await asyncio.to_thread(store.entered.wait, TIMEOUT_S)
        asked = asyncio.ensure_future(stats.run_once())  # a caller's, after its writes
        await asyncio.sleep(0.01)
        store.gate.set()
        assert await asked and await loops
        assert store.reads == 2
        assert handed.depths == [1, 2]  # the caller's read came last and after the call
        assert handed.checked == [True, True]
    finally:
        store.gate.set()
        stats.close()


async def test_a_failed_check_in_flight_does_not_fail_the_one_asked_for_after_it() -> None:
    store, handed = GatedStore(gated_reads=1, fail_first=True), Handed()
    stats = statistics(store, handed)
    try:
        loops = asyncio.ensure_future(stats.run_once())
        assert await asyncio.to_thread(store.entered.wait, TIMEOUT_S)
        asked = asyncio.ensure_future(stats.run_once())
        await asyncio.sleep(0.01)
        store.gate.set()
        assert await asked is True
        assert await loops is False
        assert handed.depths == [2]
        assert sorted(handed.checked) == [False, True]
    finally:
        store.gate.set()
        stats.close()


async def test_a_hanging_check_is_a_failure_and_starts_no_second_read() -> None:
    store, handed = GatedStore(gated_reads=1), Handed()
    stats = statistics(store, handed, timeout_s=0.05)
    try:
        assert await stats.run_once() is False
        assert await stats.run_once() is False  # still hanging: no second read queued
        assert store.reads == 1
        assert handed.depths == []
        assert handed.checked == [False, False]
        store.gate.set()
        assert await stats.run_once() is True  # the hang ended: a fresh read
        assert store.reads == 2 and handed.depths == [2]
    finally:
        store.gate.set()
        stats.close()
