"""What a run can end with, as seen by middleware (R-6).

Middleware calls ``call_next()`` and gets a ``JobResult`` back; it may also return one of
its own instead of raising. Raising anything propagates as an exception outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum


class Outcome(StrEnum):
    """How one attempt ended (R-4, R-5, R-12)."""

    SUCCEEDED = "succeeded"
    RETRYABLE_FAILURE = "retryable_failure"
    PERMANENT_FAILURE = "permanent_failure"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"
    UNSTARTED_ABANDONED = "unstarted_abandoned"
    RELEASED = "released"


@dataclass(frozen=True, slots=True)
class Success:
    """The handler finished; ``output`` is persisted with the job (R-16)."""

    output: bytes | None = None

    def __post_init__(self) -> None:
        if self.output is not None and not isinstance(self.output, bytes):
            raise TypeError(f"Success.output must be bytes or None, got {type(self.output).__name__}")


@dataclass(frozen=True, slots=True)
class Retry:
    """Retry the job; uses one execution (R-6).

    Attributes:
        reason: Recorded as the attempt's error code (name grammar; other characters
            become ``_``).
        delay: The delay before the next try, used as given (no jitter) and capped at the
            job's max retry delay; None uses the job's retry policy (R-2). A negative
            delay is a contract fault: the coordinator fails the job permanently with
            ``negative_retry_delay``.
    """

    reason: str
    delay: timedelta | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str):
            raise TypeError(f"Retry.reason must be a str, got {type(self.reason).__name__}")
        if self.delay is not None and not isinstance(self.delay, timedelta):
            raise TypeError(f"Retry.delay must be a timedelta or None, got {type(self.delay).__name__}")


@dataclass(frozen=True, slots=True)
class Failed:
    """Fail the job permanently with ``code`` (R-6); the message is cut to 1,024 bytes."""

    code: str
    message: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not isinstance(self.message, str):
            raise TypeError("Failed.code and Failed.message must be str")


JobResult = Success | Retry | Failed
"""The result type middleware returns."""
