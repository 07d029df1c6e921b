"""Cron expressions (R-18), evaluated with the ``cronsim`` library: checking one, and
iterating a schedule's ticks in its time zone.

cronsim walks naive local wall times; ``domain.schedules`` turns each into an instant
(a local time that does not exist is skipped, one that happens twice runs once), so the
same rule holds for every expression, whatever cronsim's own DST handling of aware
datetimes would do.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, tzinfo
from itertools import islice

from cronsim import CronSim, CronSimError

from coordinator.domain.schedules import NEXT_RUNS, instants, start_wall

MAX_CRON_LENGTH = 256
"""The ``schedules.cron`` column's size, in characters."""
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The usual shorthands, each standing for its five-field expression."""


class CronError(ValueError):
    """The cron expression is not valid; the message says why."""


def normalize_cron(expression: str) -> str:
    """The expression with single spaces (a shorthand lower-cased); raises CronError
    unless it is five fields (minute hour day-of-month month day-of-week), six (a leading
    seconds field) or one of ``MACROS``."""
    text = " ".join(expression.split())
    if not text:
        raise CronError("must not be empty")
    if len(text) > MAX_CRON_LENGTH:
        raise CronError(f"is {len(text)} characters, the limit is {MAX_CRON_LENGTH}")
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise CronError(f"unknown shorthand; known are {', '.join(MACROS)}")
        return text.lower()
    fields = len(text.split(" "))
    if fields not in (5, 6):
        raise CronError(
            f"has {fields} fields; write 5 (minute hour day-of-month month day-of-week) "
            "or 6 (a leading seconds field)"
        )
    try:
        CronSim(text, datetime(2026, 1, 1))
    except CronSimError as exc:
        raise CronError(str(exc).lower() or "is not valid") from None
    except (ValueError, IndexError, KeyError) as exc:  # cronsim's parser on odd input
        raise CronError(f"is not valid ({type(exc).__name__})") from None
    return text


class Cron:
    """A valid (normalized) expression in a time zone: its ticks as instants in
    milliseconds, whole seconds (``domain.schedules.Ticks``)."""

    def __init__(self, expression: str, zone: tzinfo) -> None:
        self.expression = MACROS.get(expression, expression)
        self.zone = zone

    def after(self, after_ms: int) -> Iterator[int]:
        """Ticks strictly after ``after_ms``, increasing."""
        start = start_wall(after_ms // 1000, self.zone, forward=True)
        for instant in instants(CronSim(self.expression, start), self.zone):
            if instant > after_ms:
                yield instant

    def before(self, before_ms: int) -> Iterator[int]:
        """Ticks strictly before ``before_ms``, decreasing."""
        start = start_wall(-(-before_ms // 1000), self.zone, forward=False)
        for instant in instants(CronSim(self.expression, start, reverse=True), self.zone):
            if instant < before_ms:
                yield instant

    def next_after(self, after_ms: int) -> int | None:
        """The first tick strictly after ``after_ms``, None when there is none."""
        return next(self.after(after_ms), None)

    def upcoming(self, first_ms: int | None, count: int = NEXT_RUNS) -> tuple[int, ...]:
        """``first_ms`` and the ticks after it, ``count`` in all."""
        if first_ms is None or count <= 0:
            return ()
        return (first_ms, *islice(self.after(first_ms), count - 1))
