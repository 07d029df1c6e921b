"""What the coordinator has been doing lately, summed from the per-minute counts of ended
jobs: throughput and failure rate over a window (the dashboard's overview)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.domain.records import FinishedMinute
from coordinator.domain.states import JobState

MINUTE_MS = 60_000
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class MinuteTotals:
    """Jobs that ended during one minute, over every queue (or one)."""

    minute_ms: int
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.cancelled


@dataclass(frozen=True, slots=True)
class Throughput:
    """Ended jobs per minute over a window, oldest minute first, every minute present."""

    minutes: tuple[MinuteTotals, ...]

    @property
    def succeeded(self) -> int:
        return sum(m.succeeded for m in self.minutes)

    @property
    def failed(self) -> int:
        return sum(m.failed for m in self.minutes)

    @property
    def cancelled(self) -> int:
        return sum(m.cancelled for m in self.minutes)

    @property
    def ended(self) -> int:
        return sum(m.ended for m in self.minutes)

    @property
    def failure_rate(self) -> float | None:
        """Failed among the jobs that succeeded or failed; None when none did."""
        finished = self.succeeded + self.failed
        return self.failed / finished if finished else None

    @property
    def busiest(self) -> int:
        return max((m.ended for m in self.minutes), default=0)


def throughput(
    counts: Iterable[FinishedMinute], now_ms: int, window_ms: int = HOUR_MS, *, queue: str | None = None
) -> Throughput:
    """The window's minutes up to and including ``now_ms``'s, from ``counts`` (those of
    ``queue`` only, when given); minutes without counts are zero."""
    last = now_ms - now_ms % MINUTE_MS
    first = last - (max(window_ms, MINUTE_MS) // MINUTE_MS - 1) * MINUTE_MS
    sums: dict[int, dict[JobState, int]] = {}
    for count in counts:
        if (queue is not None and count.queue != queue) or not first <= count.minute_ms <= last:
            continue
        by_state = sums.setdefault(count.minute_ms, {})
        by_state[count.state] = by_state.get(count.state, 0) + count.count
    minutes = []
    for minute in range(first, last + 1, MINUTE_MS):
        by_state = sums.get(minute, {})
        minutes.append(
            MinuteTotals(
                minute,
                by_state.get(JobState.SUCCEEDED, 0),
                by_state.get(JobState.FAILED, 0),
                by_state.get(JobState.CANCELLED, 0),
            )
        )
    return Throughput(tuple(minutes))
