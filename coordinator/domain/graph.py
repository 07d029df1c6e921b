"""What the dashboard's job page draws: a job's workflow neighbourhood (its parents and
children with their states, bounded) and its attempts on one time axis. Pure values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.domain.records import AttemptRecord
from coordinator.domain.states import JobState

GRAPH_LIMIT = 64
"""Parents and children shown each way (as R-15 bounds a job's parents)."""


@dataclass(frozen=True, slots=True)
class Relative:
    job_id: str
    wire_name: str
    state: JobState


@dataclass(frozen=True, slots=True)
class Neighbourhood:
    parents: tuple[Relative, ...]
    children: tuple[Relative, ...]
    more_parents: bool
    """More parents exist than are shown (``GRAPH_LIMIT``)."""
    more_children: bool


@dataclass(frozen=True, slots=True)
class Bar:
    """One attempt on the timeline, in thousandths of the axis (0 to 1000)."""

    attempt: AttemptRecord
    start: int
    """Where the claim is."""
    wait: int
    """From claim to start (or to the end, for an attempt never started)."""
    run: int
    """From start to end (or to the axis's end, while it runs)."""


def timeline(attempts: Sequence[AttemptRecord]) -> tuple[list[Bar], int, int]:
    """The bars of ``attempts`` on one axis from the first claim to the last thing known
    (a claim, start or end; a little further while one is open), and that axis's first
    and last millisecond. An attempt not ended yet reaches the axis's end: the picture
    depends on the attempts alone, not on the clock, so a live page's bytes change only
    when an attempt does."""
    if not attempts:
        return [], 0, 0
    first = min(a.claimed_at_ms for a in attempts)
    last = max(_known(a) for a in attempts)
    if any(a.finished_at_ms is None for a in attempts):
        # Room for what is still going on: a tenth more (at least a second), so a bar
        # not ended shows as one reaching on, without the clock in the picture.
        last += max((last - first) // 10, 1_000)
    span = max(last - first, 1)

    def at(ms: int) -> int:
        return round((ms - first) * 1000 / span)

    bars = []
    for attempt in attempts:
        end = attempt.finished_at_ms if attempt.finished_at_ms is not None else last
        started = attempt.started_at_ms if attempt.started_at_ms is not None else end
        start, begun, done = at(attempt.claimed_at_ms), at(started), at(end)
        # A run that started shows, however short: a sliver of one unit for a handler
        # that ended within the millisecond (or the axis's rounding) it began in.
        ran = max(done - begun, 1 if attempt.started_at_ms is not None else 0)
        bars.append(Bar(attempt, start, max(begun - start, 0), ran))
    return bars, first, last


def _known(attempt: AttemptRecord) -> int:
    for ms in (attempt.finished_at_ms, attempt.started_at_ms):
        if ms is not None:
            return ms
    return attempt.claimed_at_ms
