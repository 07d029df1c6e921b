"""Running one coordinator process: its dispatcher and background loops started,
checked, drained and stopped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from coordinator.app.core import CoordinatorCore
from coordinator.domain.clock import OffsetClock
from coordinator.scheduler.clock import DatabaseClock
from coordinator.service.schedules import Fired
from coordinator.store.notify import listen_for_jobs

log = logging.getLogger(__name__)

ReadinessListener = Callable[[bool], Awaitable[None]]


class Lifecycle(CoordinatorCore):
    """Start, checks, drain, stop, close."""

    _readiness_listeners: list[ReadinessListener]
    _tasks: list[asyncio.Task[None]]
    _dispatch_task: asyncio.Task[None] | None
    _listen_task: asyncio.Task[None] | None

    def start(self) -> None:
        """Runs the dispatcher and the background loops on the running event loop."""
        stop = self._stop
        self._dispatch_task = asyncio.create_task(self.dispatcher.run(), name="runwick-dispatch")
        loops: list[tuple[str, Callable[[asyncio.Event], Coroutine[Any, Any, None]]]] = [
            ("leases", self.lease_expiry.run),
            ("due", self.due_promotion.run),
            ("stats", self.queue_statistics.run),
            ("counts", self.count_folding.run),
            ("schedules", self.schedule_ticks.run),
        ]
        if self.config.auth_enabled:
            loops.append(("revocations", self.revoked_streams.run))
        if self.retention.ages:
            loops.append(("retention", self.retention.run))
        if isinstance(self.clock, OffsetClock):
            refresh = DatabaseClock(
                self.store, self.clock, self.executors, self.config.clock_refresh_interval_s
            )
            loops.append(("clock", refresh.run))
        self._tasks = [asyncio.create_task(run(stop), name=f"runwick-{name}") for name, run in loops]
        if self.store.postgres:
            listen = listen_for_jobs(
                self.store.url, self._heard_of_jobs, self.dispatcher.hears_all, own_origin=self.store.origin
            )
            self._listen_task = asyncio.create_task(listen, name="runwick-listen")
        else:
            self.dispatcher.hears_all(True)  # SQLite: this process makes every write

    def on_readiness(self, listener: ReadinessListener) -> None:
        """Calls ``listener(ok)`` after every database check."""
        self._readiness_listeners.append(listener)

    async def _database_checked(self, ok: bool) -> None:
        self.metrics.database_up.set(1 if ok else 0)
        for listener in self._readiness_listeners:
            await listener(ok)

    async def check_database(self) -> bool:
        """One database check now (readiness and the queue gauges)."""
        return await self.queue_statistics.run_once()

    async def run_maintenance(self) -> None:
        """One pass of lease expiry and due-job promotion (tests with a fake clock call it
        after advancing the clock)."""
        await self.lease_expiry.run_once()
        await self.due_promotion.run_once()

    async def run_schedules(self) -> list[Fired]:
        """One pass of the schedule loop: enqueues the ticks that have come (tests with
        a fake clock call it after advancing the clock)."""
        return await self.schedule_ticks.run_once()

    async def drain(self, timeout_s: float) -> None:
        """Asks every worker to finish and go, and waits until they have or time is up."""
        await self.dispatcher.drain(timeout_s)

    async def stop_background(self) -> None:
        """Ends the dispatcher (after the batch in hand) and the loops, then every stream."""
        self.dispatcher.stop()
        self._stop.set()
        if self._listen_task is not None:
            self._listen_task.cancel()
        others = [t for t in (self._dispatch_task, self._listen_task) if t is not None]
        for task in [*self._tasks, *others]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.dispatcher.close_sessions()

    def close(self) -> None:
        """Releases threads and the database; call after ``stop_background``."""
        self.executors.shutdown()
        self.queue_statistics.close()
        self.store.close()

    def _token_revoked_elsewhere(self, token_id: str) -> None:
        closed = self.dispatcher.close_token_sessions(token_id)
        self.tokens.forget(token_id)
        if closed:
            log.info("token %s was revoked: ended %d worker streams opened with it", token_id, closed)
