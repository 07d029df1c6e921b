"""Durations as people write them on the command line and in the config file: a whole
number and a unit — ``500ms``, ``30s``, ``15m``, ``12h``, ``7d`` — or several in a row
(``1d12h``); a bare ``0`` is zero. SDK-only: no server imports."""

from __future__ import annotations

import re

UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_DURATION_MS = 36_500 * UNITS_MS["d"]
"""100 years: longer is surely a mistake (and beyond what some clocks can subtract)."""
_PART = re.compile(r"(\d+)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:ms|s|m|h|d))+")
EXAMPLES = "30s, 15m, 12h or 7d"


class DurationError(ValueError):
    """Not a duration; the message quotes the text and shows the form."""


def parse_duration_ms(text: str) -> int:
    """Milliseconds of ``text``; raises DurationError for anything else (a negative
    duration, a number without a unit, an unknown unit, over 100 years)."""
    value = text.strip().lower().replace("_", "")
    if value == "0":
        return 0
    if value.startswith("-"):
        raise DurationError(f"{text!r} is negative; give a duration such as {EXAMPLES}")
    if value.isdigit():
        raise DurationError(f"{text!r} has no unit; give one, e.g. {value}s or {value}d ({EXAMPLES})")
    if not _WHOLE.fullmatch(value):
        raise DurationError(f"{text!r} is not a duration; give a whole number and a unit: {EXAMPLES}")
    total = sum(int(number) * UNITS_MS[unit] for number, unit in _PART.findall(value))
    if total > MAX_DURATION_MS:
        raise DurationError(f"{text!r} is over 100 years")
    return total


def format_duration_ms(ms: int) -> str:
    """``ms`` in the largest units that say it exactly: ``7d``, ``1h30m``, ``0``."""
    if ms == 0:
        return "0"
    parts: list[str] = []
    rest = ms
    for unit, size in sorted(UNITS_MS.items(), key=lambda item: -item[1]):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
