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


class WritePass:
    """A service write run every interval on the writer (``Executors.write``), whose
    effects are handed on as a worker batch's are."""

    def __init__(
        self,
        operation: Callable[[], Effects],
        executors: Executors,
        on_effects: Callable[[Effects], None],
        interval_s: float,
        what: str,
    ) -> None:
        self.operation = operation
        self.executors = executors
        self.on_effects = on_effects
        self.interval_s = interval_s
        self.what = what

    async def run_once(self) -> None:
        self.on_effects(await self.executors.write(self.operation))

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, stop, self.run_once, self.what)
