"""Queue statistics and readiness: a background read of the queue depths and the oldest
due job per queue; whether it worked decides readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from coordinator.domain.clock import Clock
from coordinator.domain.rates import held_back
from coordinator.domain.states import JobState
from coordinator.scheduler.loop import sleep_or_stop
from coordinator.store import Store

log = logging.getLogger(__name__)

QueueStats = tuple[
    dict[tuple[str, str], int], dict[str, int], int, frozenset[str], dict[tuple[str, str], int]
]
"""Depth per (queue, state), oldest due run-at per queue, the time they were read, the
paused queues, and the available jobs held back per (queue, kind of limit)."""
OnStats = Callable[[Mapping[tuple[str, str], int], Mapping[str, int], int, frozenset[str]], None]
OnChecked = Callable[[bool], Awaitable[None]]
OnHeldBack = Callable[[Mapping[tuple[str, str], int]], None]
RATE = "rate"
"""The kind of limit a rate is, as the held-back gauge labels it."""


def read_queue_stats(store: Store, clock: Clock) -> QueueStats:
    """The gauges' values, from the same bounded counts ``runwick queues list`` shows."""
    now_ms = clock.now_ms()
    depths: dict[tuple[str, str], int] = {}
    oldest: dict[str, int] = {}
    paused: set[str] = set()
    held: dict[tuple[str, str], int] = {}
    for stats in store.queue_stats(now_ms):
        name = stats.queue.name
        available = stats.counts.get(JobState.AVAILABLE, 0)
        if stats.queue.rate_count is not None and available:  # one more read, rated queues only
            rate, used = store.rate_state(name, now_ms)
            if rate is not None:
                held[(name, RATE)] = held_back(rate, used, available)
        if stats.queue.paused:
            paused.add(name)
        depths.update(
            ((name, state.value), count)
            for state, count in stats.counts.items()
            if not state.terminal and count
        )
        if stats.oldest_due_run_at_ms is not None:
            oldest[name] = stats.oldest_due_run_at_ms
    return depths, oldest, now_ms, frozenset(paused), held


class QueueStatistics:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        interval_s: float,
        timeout_s: float,
        on_stats: OnStats,
        on_checked: OnChecked,
        on_held_back: OnHeldBack | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.on_stats = on_stats
        self.on_checked = on_checked
        self.on_held_back = on_held_back
        # Its own thread: a check hanging on a dead database must not hold up reads.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="runwick-check")
        self._check: asyncio.Future[QueueStats] | None = None

    async def run_once(self) -> bool:
        """Reads the statistics; whether that worked decides readiness. The values read
        are never older than the call: a check already in flight (the loop's, when a
        caller asks for one of its own) may have read before the caller's last writes, so
        it is waited for and a fresh one started. A check still hanging from before
        counts as a failure and no second one is started."""
        loop = asyncio.get_running_loop()
        ok = False
        if self._check is not None and not self._check.done():
            await asyncio.wait({self._check}, timeout=self.timeout_s)  # its caller logs its end
        try:
            if self._check is not None and not self._check.done():
                raise TimeoutError  # still hanging after a timeout's wait: no second read
            self._check = loop.run_in_executor(self._executor, read_queue_stats, self.store, self.clock)
            depths, oldest, now_ms, paused, held = await asyncio.wait_for(
                asyncio.shield(self._check), self.timeout_s
            )
        except TimeoutError:
            log.warning("database check took over %.1f s", self.timeout_s)
        except Exception as exc:
            log.warning("database check failed: %s", type(exc).__name__)
            log.debug("database check failure", exc_info=exc)
        else:
            ok = True
            self.on_stats(depths, oldest, now_ms, paused)
            if self.on_held_back is not None:
                self.on_held_back(held)
        await self.on_checked(ok)
        return ok

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.run_once()
            if await sleep_or_stop(stop, self.interval_s):
                return

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
