"""Queue statistics and readiness: a background read of the queue depths and the oldest
due job per queue; whether it worked decides readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import Clock
from coordinator.domain.states import JobState
from coordinator.scheduler.loop import sleep_or_stop
from coordinator.store import Store

log = logging.getLogger(__name__)

MAX_WALKED_JOBS = CoordinatorConfig().held_back_walked_jobs
"""Due jobs walked per queue with a per-key control, unless the config says otherwise."""

QueueStats = tuple[
    dict[tuple[str, str], int],
    dict[str, int],
    int,
    frozenset[str],
    dict[tuple[str, str], int],
    dict[str, int],
]
"""Depth per (queue, state), oldest due run-at per queue, the time they were read, the
paused queues, the available jobs held back per (queue, kind of control), and the
runnable ones of each queue with a control (``domain.backlog``)."""
OnStats = Callable[
    [
        Mapping[tuple[str, str], int],
        Mapping[str, int],
        int,
        frozenset[str],
        Mapping[tuple[str, str], int],
        Mapping[str, int],
    ],
    None,
]
OnChecked = Callable[[bool], Awaitable[None]]


def read_queue_stats(store: Store, clock: Clock, scan: int = MAX_WALKED_JOBS) -> QueueStats:
    """The gauges' values, from the same bounded counts ``runwick queues list`` shows;
    for each queue with a control and available jobs, what its controls hold back
    (``store.backlog``: no read for a paused queue, one or two for a limited or rated
    one, at most ``scan`` due jobs walked)."""
    now_ms = clock.now_ms()
    depths: dict[tuple[str, str], int] = {}
    oldest: dict[str, int] = {}
    paused: set[str] = set()
    held: dict[tuple[str, str], int] = {}
    runnable: dict[str, int] = {}
    for stats in store.queue_stats(now_ms):
        name = stats.queue.name
        if not stats.queue.free and stats.counts.get(JobState.AVAILABLE, 0):
            found = store.held_back_of(stats, now_ms, scan)
            held.update(((name, kind.value), count) for kind, count in found.held.items())
            runnable[name] = found.runnable
        if stats.queue.paused:
            paused.add(name)
        depths.update(
            ((name, state.value), count)
            for state, count in stats.counts.items()
            if not state.terminal and count
        )
        if stats.oldest_due_run_at_ms is not None:
            oldest[name] = stats.oldest_due_run_at_ms
    return depths, oldest, now_ms, frozenset(paused), held, runnable


class QueueStatistics:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        interval_s: float,
        timeout_s: float,
        on_stats: OnStats,
        on_checked: OnChecked,
        max_walked_jobs: int = MAX_WALKED_JOBS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.on_stats = on_stats
        self.on_checked = on_checked
        self.max_walked_jobs = max_walked_jobs
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
            self._check = loop.run_in_executor(
                self._executor, read_queue_stats, self.store, self.clock, self.max_walked_jobs
            )
            depths, oldest, now_ms, paused, held, runnable = await asyncio.wait_for(
                asyncio.shield(self._check), self.timeout_s
            )
        except TimeoutError:
            log.warning("database check took over %.1f s", self.timeout_s)
        except Exception as exc:
            log.warning("database check failed: %s", type(exc).__name__)
            log.debug("database check failure", exc_info=exc)
        else:
            ok = True
            self.on_stats(depths, oldest, now_ms, paused, held, runnable)
        await self.on_checked(ok)
        return ok

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.run_once()
            if await sleep_or_stop(stop, self.interval_s):
                return

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
