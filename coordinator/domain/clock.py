"""Clocks: the one injected source of time (R-13)."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Gives the current time in whole milliseconds since the Unix epoch."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The host's wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class OffsetClock:
    """The host's clock shifted by an offset, so replicas agree on one time source.

    With PostgreSQL the offset is ``database now - host now``, measured at start and
    refreshed, which anchors every replica to the database's clock (R-13).
    """

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


class FakeClock:
    """A clock that moves only when told to. For tests."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, ms: int) -> int:
        """Moves the clock forward by ``ms`` and returns the new time."""
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now_ms += ms
            return self._now_ms
