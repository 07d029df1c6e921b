"""Progress reports: checked where the handler makes them, sent on the heartbeats.

A handler may report as often as it likes: the worker keeps only each run's latest
report and sends it with the next heartbeat, once, if it changed. So reporting costs
the coordinator at most one small write per run per heartbeat interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from worker_sdk.proto.runwick.v1 import job_pb2

MAX_PROGRESS_MESSAGE_CHARS = 256
"""The longest progress message (a status line, not a log); the coordinator's bound too."""


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


def progress_from_proto(message: job_pb2.Progress) -> ProgressReport:
    """A report from its wire form."""
    total = message.total if message.HasField("total") else None
    return ProgressReport(message.done, total, message.message)


def checked_report(done: object, total: object, message: object) -> ProgressReport:
    """The report, or ValueError saying what is wrong with it (raised in the handler,
    so a bad report never reaches the coordinator)."""
    done_value = _amount("done", done)
    total_value = None if total is None else _amount("total", total)
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise ValueError(f"progress message must be a str or None, not {type(message).__name__}")
    if len(message) > MAX_PROGRESS_MESSAGE_CHARS:
        raise ValueError(
            f"progress message has {len(message)} characters, over the limit of {MAX_PROGRESS_MESSAGE_CHARS}"
        )
    return ProgressReport(done_value, total_value, message)


def _amount(name: str, value: object) -> float:
    # bool is an int subclass, but True/False as an amount of work is a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"progress {name} must be an int or a float, not {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"progress {name} must be a finite number and not negative, not {value!r}")
    return number


def _number(value: float) -> str:
    """``37`` rather than ``37.0``; fractions as given."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
