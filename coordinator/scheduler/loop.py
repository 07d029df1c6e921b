"""Runs one pass of a background job every interval until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from coordinator.service.effects import Effects
from coordinator.service.executors import Executors

log = logging.getLogger(__name__)


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Waits ``seconds`` or until ``stop`` is set; True when it was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()


async def every(
    interval_s: float, stop: asyncio.Event, one_pass: Callable[[], Awaitable[None]], what: str
) -> None:
    """Waits an interval, runs ``one_pass``, and so on until ``stop``; a failed pass is
    logged and tried again at the next interval."""
    while not await sleep_or_stop(stop, interval_s):
        try:
            await one_pass()
        except Exception:
            log.exception("%s failed; retrying next interval", what)


class Cadence:
    """How long a maintenance loop sleeps between passes: ``interval_s`` while its last
    pass left something to watch, ``idle_interval_s`` (never less) when it did not, so an
    idle coordinator sends the database next to nothing. ``wake()`` cuts an idle sleep
    short to ``interval_s`` from then, for work this replica made or heard of (a claim, a
    scheduled job, a notification that another replica enqueued): one interval later the
    pass sees the leases that work took, so it stays awake while they last, on every
    replica, and a replica that crashes leaves no lease unwatched."""

    def __init__(self, interval_s: float, idle_interval_s: float) -> None:
        self.interval_s = interval_s
        self.idle_interval_s = max(idle_interval_s, interval_s)
        self.idle = False
        self._woken = asyncio.Event()

    def wake(self) -> None:
        if self.idle:
            self.idle = False
            self._woken.set()

    async def sleep(self, stop: asyncio.Event) -> bool:
        """Sleeps per the last pass; True when ``stop`` was set."""
        seconds = self.idle_interval_s if self.idle else self.interval_s
        self._woken.clear()
        stopped = asyncio.ensure_future(stop.wait())
        woken = asyncio.ensure_future(self._woken.wait())
        try:
            await asyncio.wait({stopped, woken}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            woken.cancel()
        if self._woken.is_set() and not stop.is_set():
            return await sleep_or_stop(stop, self.interval_s)
        return stop.is_set()


class WritePass:
    """A service write run on the writer (``Executors.write``) at its ``cadence``, whose
    effects are handed on as a worker batch's are."""

    def __init__(
        self,
        operation: Callable[[], Effects],
        executors: Executors,
        on_effects: Callable[[Effects], None],
        cadence: Cadence,
        what: str,
    ) -> None:
        self.operation = operation
        self.executors = executors
        self.on_effects = on_effects
        self.cadence = cadence
        self.what = what

    async def run_once(self) -> None:
        effects = await self.executors.write(self.operation)
        self.cadence.idle = effects.maintenance_left is False
        self.on_effects(effects)

    async def run(self, stop: asyncio.Event) -> None:
        while not await self.cadence.sleep(stop):
            try:
                await self.run_once()
            except Exception:
                self.cadence.idle = False
                log.exception("%s failed; retrying next interval", self.what)
