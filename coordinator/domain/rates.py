"""Queue rate limits (issue 41): at most ``count`` starts of a queue's jobs, or of each
concurrency key's, in any window of ``period_ms``. Pure: the clock is passed in.

The algorithm is a sliding window over fixed slots, counted conservatively. Time is cut
into slots of ``slot_ms`` (a tenth of the period, at least 1 ms); each grant (a claim
that may start) is counted in the slot it falls in, and it counts against the rate
until the end of its slot plus a whole period. So when a grant is made at ``t``, every
earlier grant of ``(t - period, t]`` is still counted, and no window of ``period_ms``
(half-open) ever holds more than ``count`` grants. The price is at most one slot of
slack: a rate held flat out runs at ``count`` per ``period + slot``.

Why not GCRA or a token bucket: both let a full burst follow a steady run (up to twice
``count`` in one window), which breaks the bound an API's rate limit states. A log of
every grant is exact without slack but costs a row per start; slots cost at most eleven
small counters per queue (or key), and a claim may take its whole budget at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

SLOTS_PER_PERIOD = 10
"""How finely a period is cut: the slack of the window is one slot, a tenth of it."""
MAX_RATE_COUNT = 1_000_000
"""Most starts a rate may allow per period."""
MIN_RATE_PERIOD_MS = 1
MAX_RATE_PERIOD_MS = 7 * 24 * 3_600_000
"""Longest period: a week. Longer ones are refused (their state would live for months)."""

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

T = TypeVar("T")


class RateError(ValueError):
    """A rate that is not ``COUNT/PERIOD`` within the bounds; the message says why."""


@dataclass(frozen=True, slots=True)
class QueueRate:
    """At most ``count`` starts per ``period_ms``, for the whole queue or each key."""

    count: int
    period_ms: int
    per_key: bool = False

    def __post_init__(self) -> None:
        check_rate(self.count, self.period_ms)

    @property
    def slot_ms(self) -> int:
        """The width of one counting slot."""
        return max(1, self.period_ms // SLOTS_PER_PERIOD)

    def slot_of(self, now_ms: int) -> int:
        """The start of the slot ``now_ms`` falls in: grants made now are counted there."""
        return now_ms - now_ms % self.slot_ms

    def counted_since(self, now_ms: int) -> int:
        """Slots starting after this still count against grants made at ``now_ms``."""
        return now_ms - self.period_ms - self.slot_ms

    def describe(self) -> str:
        return f"{self.count}/{format_period(self.period_ms)}" + (" per key" if self.per_key else "")


def check_rate(count: int, period_ms: int) -> None:
    """Raises RateError unless ``count`` and ``period_ms`` are within the bounds."""
    if not 1 <= count <= MAX_RATE_COUNT:
        raise RateError(f"the count must be 1 to {MAX_RATE_COUNT}, got {count}")
    if not MIN_RATE_PERIOD_MS <= period_ms <= MAX_RATE_PERIOD_MS:
        raise RateError(
            f"the period must be {MIN_RATE_PERIOD_MS} ms to {MAX_RATE_PERIOD_MS // 86_400_000} days, "
            f"got {period_ms} ms"
        )


def parse_rate(text: str) -> tuple[int, int]:
    """``COUNT/PERIOD`` (``100/1m``, ``10/1s``, ``5/500ms``; a bare unit is one of it:
    ``10/s``) as (count, period in ms). Raises RateError for anything else."""
    count_text, slash, period_text = text.strip().partition("/")
    if not slash or not count_text.isdigit():
        raise RateError(f"a rate is COUNT/PERIOD, like 100/1m or 10/1s; got {text!r}")
    if len(count_text) > len(str(MAX_RATE_COUNT)):  # bounded before it is converted
        raise RateError(f"the count must be 1 to {MAX_RATE_COUNT}, got {count_text}")
    count, period_ms = int(count_text), parse_period_ms(period_text)
    check_rate(count, period_ms)
    return count, period_ms


def parse_period_ms(text: str) -> int:
    """``1s``, ``500ms``, ``1m``, ``2h``, ``1d`` or a bare unit as milliseconds."""
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    unit = text[len(digits) :]
    if unit not in _UNITS_MS or len(digits) > 12:
        raise RateError(f"a period is a number and a unit ({', '.join(_UNITS_MS)}), like 1s; got {text!r}")
    return (int(digits) if digits else 1) * _UNITS_MS[unit]


def format_period(period_ms: int) -> str:
    for unit in ("d", "h", "m", "s"):
        if period_ms % _UNITS_MS[unit] == 0:
            return f"{period_ms // _UNITS_MS[unit]}{unit}"
    return f"{period_ms}ms"


def admit(
    rate: QueueRate,
    used: Mapping[str, int],
    candidates: Iterable[T],
    key_of: Callable[[T], str],
    limit: int,
) -> tuple[list[T], dict[str, int]]:
    """The first ``limit`` of ``candidates`` (in claim order) the rate lets start now,
    and the grants they take per key. ``used`` is the grants still counted per key
    (``''`` for a queue-wide rate): a queue-wide rate counts every job under ``''``."""
    admitted: list[T] = []
    granted: dict[str, int] = {}
    for candidate in candidates:
        if len(admitted) >= limit:
            break
        key = key_of(candidate) if rate.per_key else ""
        if used.get(key, 0) + granted.get(key, 0) < rate.count:
            admitted.append(candidate)
            granted[key] = granted.get(key, 0) + 1
    return admitted, granted


def held_by_rate(rate: QueueRate, used: Mapping[str, int], key: str) -> bool:
    """Whether a job of ``key`` may not be claimed now: its rate (the queue's, or its
    key's for a per-key rate) has no room left in the window."""
    return used.get(key if rate.per_key else "", 0) >= rate.count


def held_back(rate: QueueRate, used: Mapping[str, int], available: int) -> int:
    """How many of a queue's ``available`` jobs its rate holds back now. A per-key rate's
    room is each key's own, known only with the jobs' keys: it is not counted here (0)."""
    left = room(rate, used)
    return 0 if left is None else max(0, available - left)


def room(rate: QueueRate, used: Mapping[str, int]) -> int | None:
    """How many more a queue-wide rate lets start now; None for a per-key rate (each
    key has its own room, known only with the candidates)."""
    if rate.per_key:
        return None
    return max(0, rate.count - used.get("", 0))
