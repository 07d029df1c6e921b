"""What a progress report is and when it is well formed, shared by the SDK and the
coordinator (the SDK checks a report where the handler makes it; the coordinator checks
what arrives on a heartbeat by the same rule).

The module is pure: standard library only, no I/O, no state. The coordinator may import
it (the SDK must never import the coordinator), as it does ``worker_sdk.grammar``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MAX_PROGRESS_MESSAGE_CHARS", "ProgressReport", "report_problem"]

MAX_PROGRESS_MESSAGE_CHARS = 256
"""The longest progress message: a status line, not a log."""


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """How far a run has come, as its handler last reported it."""

    done: float
    """The amount of work done, in the handler's own unit."""
    total: float | None
    """The amount of work in all; None when the handler did not say."""
    message: str
    """What the run is doing (may be empty)."""

    @property
    def percent(self) -> int | None:
        """``done`` as a whole percentage of ``total`` (None without a positive total)."""
        if self.total is None or self.total <= 0:
            return None
        return math.floor(100 * self.done / self.total)

    def summary(self) -> str:
        """One line for people: ``37/100 (37%) resizing images``."""
        text = _number(self.done)
        if self.total is not None:
            text += f"/{_number(self.total)}"
            if self.percent is not None:
                text += f" ({self.percent}%)"
        return f"{text} {self.message}" if self.message else text


def report_problem(done: float, total: float | None, message: str) -> str | None:
    """Why a report with these numbers and this message is malformed (worded without a
    subject: ``done must be ...``), or None when it is well formed."""
    for name, value in (("done", done), ("total", total)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"{name} must be a finite number and not negative, not {value!r}"
    if len(message) > MAX_PROGRESS_MESSAGE_CHARS:
        return f"message has {len(message)} characters, over the limit of {MAX_PROGRESS_MESSAGE_CHARS}"
    return None


def _number(value: float) -> str:
    """``37`` rather than ``37.0``; fractions as given."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
