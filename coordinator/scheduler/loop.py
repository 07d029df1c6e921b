"""Runs one pass of a background job every interval until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

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
