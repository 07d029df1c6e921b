"""Clocks: the one injected source of time (R-13)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    """Gives the current time in whole milliseconds since the Unix epoch."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The host's wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One reading of another clock (the database's), bracketed by two readings of ours:
    ``sent_ms`` before the question went out, ``received_ms`` once the answer was in."""

    sent_ms: int
    remote_ms: int
    received_ms: int

    @property
    def round_trip_ms(self) -> int:
        return self.received_ms - self.sent_ms


def offset_from_samples(samples: Sequence[ClockSample]) -> int:
    """How far the other clock is ahead of ours, from the sample with the shortest round
    trip, against the middle of that round trip (as NTP does): its error is at most half
    of that round trip, whichever side the delay fell on.

    Taking ``remote - received`` instead put every replica behind the database by the
    whole return delay, which on a loaded machine (a busy reader thread, the GIL) was
    seconds: two replicas' timestamps then disagreed by more than a lease, seen as
    claims "before" the ends they followed in a chaos run of two replicas at load 30.
    Raises ValueError without samples."""
    if not samples:
        raise ValueError("no clock samples")
    best = min(samples, key=lambda sample: sample.round_trip_ms)
    return best.remote_ms - (best.sent_ms + best.received_ms) // 2


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
