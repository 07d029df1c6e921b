"""The worker's timers: one seam through which the SDK reads and waits on time.

A ``Worker`` uses ``REAL_TIMERS`` (the monotonic clock and ``asyncio.sleep``). The test
coordinator (``worker_sdk.testing.Coordinator``) gives its worker ``VirtualTimers``
instead, so that moving its virtual clock also moves the SDK's execution timeouts,
cancellation graces, heartbeats and its own view of leases, without real waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

TimerPurpose = Literal["timeout", "grace", "heartbeat"]
"""What a wait is for: ``VirtualTimers`` skips to a heartbeat only while runs need one."""


class Timers(Protocol):
    """The clock and the waits of one worker."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (leases, heartbeat silence)."""
        ...

    async def sleep(self, seconds: float, purpose: TimerPurpose) -> None:
        """Returns once ``seconds`` have passed on this clock."""
        ...

    async def wait_first(
        self, futures: set[asyncio.Future[Any]], seconds: float | None, purpose: TimerPurpose
    ) -> None:
        """Returns once one of ``futures`` is done, or ``seconds`` (None: no limit) have
        passed on this clock."""
        ...


class RealTimers:
    """The host's monotonic clock and the event loop's timers."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float, purpose: TimerPurpose) -> None:
        await asyncio.sleep(seconds)

    async def wait_first(
        self, futures: set[asyncio.Future[Any]], seconds: float | None, purpose: TimerPurpose
    ) -> None:
        # The loop's own timeout: no task for the timer on the worker's hot path.
        await asyncio.wait(futures, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)


REAL_TIMERS: Timers = RealTimers()


@dataclass(order=True)
class _Sleeper:
    deadline_ms: int
    sequence: int
    purpose: TimerPurpose = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


class VirtualTimers:
    """Timers on a virtual clock of whole milliseconds: a sleep returns when
    ``fire_due`` finds its deadline reached, which happens only when the owner moves the
    clock and says so. Deadlines are whole milliseconds (a wait rounded up), so the
    owner can stop the clock exactly on one.

    Everything runs on the one event loop that sleeps and fires (the worker's); the
    clock itself (``now_ms``) may be read from any thread.
    """

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._sleepers: list[_Sleeper] = []
        self._sequence = itertools.count()
        self._released = False

    def monotonic(self) -> float:
        return self._now_ms() / 1000

    async def sleep(self, seconds: float, purpose: TimerPurpose) -> None:
        if self._released or seconds <= 0:
            await asyncio.sleep(0)
            return
        future = asyncio.get_running_loop().create_future()
        # Rounded to the nanosecond first: 4.07 s is 4070.0000000000005 ms in floats.
        deadline_ms = self._now_ms() + math.ceil(round(seconds * 1000, 6))
        sleeper = _Sleeper(deadline_ms, next(self._sequence), purpose, future)
        heapq.heappush(self._sleepers, sleeper)
        try:
            await future
        finally:
            if not future.done():  # the sleeper was cancelled: forget its deadline
                future.cancel()

    async def wait_first(
        self, futures: set[asyncio.Future[Any]], seconds: float | None, purpose: TimerPurpose
    ) -> None:
        if seconds is None:
            await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
            return
        timer = asyncio.ensure_future(self.sleep(seconds, purpose))
        try:
            await asyncio.wait({*futures, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()

    def next_deadline_ms(self, purposes: frozenset[TimerPurpose]) -> int | None:
        """The earliest deadline of a pending sleep for one of ``purposes``, if any."""
        self._drop_cancelled()
        pending = [s.deadline_ms for s in self._sleepers if s.purpose in purposes]
        return min(pending) if pending else None

    def fire_due(self) -> int:
        """Wakes every sleep whose deadline has come; returns how many it woke."""
        now_ms = self._now_ms()
        woken = 0
        while self._sleepers and self._sleepers[0].deadline_ms <= now_ms:
            sleeper = heapq.heappop(self._sleepers)
            if not sleeper.future.done():
                sleeper.future.set_result(None)
                woken += 1
        return woken

    def release_all(self) -> None:
        """Wakes every sleep now and lets later ones return at once (for shutdown)."""
        self._released = True
        while self._sleepers:
            sleeper = heapq.heappop(self._sleepers)
            if not sleeper.future.done():
                sleeper.future.set_result(None)

    def _drop_cancelled(self) -> None:
        if any(s.future.done() for s in self._sleepers):
            self._sleepers = [s for s in self._sleepers if not s.future.done()]
            heapq.heapify(self._sleepers)
