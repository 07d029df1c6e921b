"""Progress of a run, as its handler reports it over the worker's heartbeats.

A report is two numbers and a short text: ``done`` and, when the handler knows it,
``total`` (finite and not negative, in the handler's own unit), and what the run is
doing. The coordinator keeps the latest report of each attempt, stored as one small
JSON text so that a report costs one column and one write.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProgressBounds:
    """What one progress report may hold."""

    max_message_chars: int = 256
    """The longest message: a status line, not a log."""


PROGRESS_BOUNDS = ProgressBounds()


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a run has come."""

    done: float
    total: float | None
    message: str

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


def progress_problem(done: float, total: float | None, message: str) -> str | None:
    """Why a report is malformed, or None when it is well formed."""
    for name, value in (("done", done), ("total", total)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            return f"{name} must be a finite number and not negative, not {value!r}"
    if len(message) > PROGRESS_BOUNDS.max_message_chars:
        return f"message has {len(message)} characters, over the limit of {PROGRESS_BOUNDS.max_message_chars}"
    return None


def encode_progress(progress: Progress) -> str:
    """The stored form of a report (``attempts.progress``)."""
    return json.dumps([progress.done, progress.total, progress.message], ensure_ascii=False)


def decode_progress(text: str | None) -> Progress | None:
    """The report stored as ``text`` (None for no report)."""
    if text is None:
        return None
    done, total, message = json.loads(text)
    return Progress(float(done), None if total is None else float(total), str(message))


def _number(value: float) -> str:
    """``37`` rather than ``37.0``; fractions as given."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
