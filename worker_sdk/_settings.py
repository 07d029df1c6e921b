"""Retry and timeout settings on the client side: validation and precedence (R-1..R-4, R-7).

Three client-side levels, later wins (R-3): ``client.job_defaults(...)`` < the ``@job``
declaration < ``client.configure_job(Type)``. The client merges them and sends only what
is set; the coordinator fills the rest from its ``JobDefaults`` and the library defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from worker_sdk._errors import ArgumentError
from worker_sdk.proto.runwick.v1 import job_pb2

if TYPE_CHECKING:
    from google.protobuf import duration_pb2

MAX_COUNT = 100
MIN_DELAY = timedelta(milliseconds=1)
MAX_DELAY = timedelta(hours=24)
MAX_EXECUTION_TIMEOUT = timedelta(days=30)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class JobSettings:
    """The effective retry and timeout settings a job was enqueued with (R-3).

    Values the coordinator did not send are the library defaults.
    """

    max_executions: int = 3
    """Started runs allowed per generation (R-1)."""
    retry_initial_delay: timedelta = timedelta(seconds=5)
    """Nominal delay before the first retry (R-2)."""
    retry_max_delay: timedelta = timedelta(seconds=60)
    """Cap of the nominal retry delay (R-2)."""
    execution_timeout: timedelta | None = None
    """How long a run may take before it is timed out; None for no timeout (R-7)."""
    max_unstarted_abandonments: int = 5
    """Consecutive claims that never started before the job fails (R-4)."""
    unstarted_initial_delay: timedelta = timedelta(seconds=1)
    """First re-queue delay after an unstarted claim lapsed (R-4)."""
    unstarted_max_delay: timedelta = timedelta(seconds=30)
    """Cap of the unstarted re-queue delay (R-4)."""


@dataclass(frozen=True, slots=True)
class SettingsLayer:
    """One precedence level: None leaves a field to the levels below.

    ``no_execution_timeout`` removes a timeout set by a lower level (or the coordinator).
    """

    max_executions: int | None = None
    retry_initial_delay: timedelta | None = None
    retry_max_delay: timedelta | None = None
    execution_timeout: timedelta | None = None
    no_execution_timeout: bool = False
    max_unstarted_abandonments: int | None = None
    unstarted_initial_delay: timedelta | None = None
    unstarted_max_delay: timedelta | None = None

    def over(self, base: SettingsLayer) -> SettingsLayer:
        """Returns this level laid over ``base``: this one wins where it is set."""
        merged = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "no_execution_timeout"}
        for name, value in merged.items():
            if value is None:
                merged[name] = getattr(base, name)
        no_timeout = self.no_execution_timeout
        if self.execution_timeout is None and not self.no_execution_timeout:
            no_timeout = base.no_execution_timeout
        if no_timeout:
            merged["execution_timeout"] = None
        return SettingsLayer(**merged, no_execution_timeout=no_timeout)

    def checked(self) -> SettingsLayer:
        """Returns self after checking every set field; raises ArgumentError otherwise."""
        check_count("max_executions", self.max_executions)
        check_count("max_unstarted_abandonments", self.max_unstarted_abandonments)
        check_delay_pair("retry", self.retry_initial_delay, self.retry_max_delay)
        check_delay_pair("unstarted", self.unstarted_initial_delay, self.unstarted_max_delay)
        check_timeout(self.execution_timeout)
        return self

    def to_proto(self) -> job_pb2.JobSettings:
        """The enqueue-request settings: only what is set."""
        message = job_pb2.JobSettings()
        if self.max_executions is not None:
            message.max_executions = self.max_executions
        if self.max_unstarted_abandonments is not None:
            message.max_unstarted_abandonments = self.max_unstarted_abandonments
        for name in (
            "retry_initial_delay",
            "retry_max_delay",
            "execution_timeout",
            "unstarted_initial_delay",
            "unstarted_max_delay",
        ):
            value: timedelta | None = getattr(self, name)
            if value is not None:
                field: duration_pb2.Duration = getattr(message, name)
                field.FromTimedelta(value)
        if self.no_execution_timeout:
            message.no_execution_timeout = True
        return message


def check_count(name: str, value: int | None) -> None:
    """Checks an execution or abandonment count: an int from 1 to 100."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= value <= MAX_COUNT:
        raise ArgumentError(f"{name} must be 1 to {MAX_COUNT}, got {value}")


def _check_whole_ms(name: str, value: timedelta) -> None:
    if not isinstance(value, timedelta):
        raise ArgumentError(f"{name} must be a timedelta, got {type(value).__name__}")
    if value % _ONE_MS:
        raise ArgumentError(f"{name} must be a whole number of milliseconds, got {value}")


def check_delay(name: str, value: timedelta | None) -> None:
    """Checks one retry or recovery delay: whole milliseconds, 1 ms to 24 h."""
    if value is None:
        return
    _check_whole_ms(name, value)
    if not MIN_DELAY <= value <= MAX_DELAY:
        raise ArgumentError(f"{name} must be 1 ms to 24 h, got {value}")


def check_delay_pair(prefix: str, initial: timedelta | None, maximum: timedelta | None) -> None:
    """Checks a delay pair (R-2, R-4): each valid, and initial <= max when both are set."""
    check_delay(f"{prefix}_initial_delay", initial)
    check_delay(f"{prefix}_max_delay", maximum)
    if initial is not None and maximum is not None and initial > maximum:
        raise ArgumentError(
            f"{prefix}_initial_delay ({initial}) must not exceed {prefix}_max_delay ({maximum})"
        )


def check_timeout(value: timedelta | None) -> None:
    """Checks an execution timeout: whole milliseconds, 1 ms to 30 days (R-7)."""
    if value is None:
        return
    _check_whole_ms("execution_timeout", value)
    if not _ONE_MS <= value <= MAX_EXECUTION_TIMEOUT:
        raise ArgumentError(f"execution_timeout must be 1 ms to 30 days, got {value}")


def pair(name: str, value: tuple[timedelta, timedelta]) -> tuple[timedelta, timedelta]:
    """Unpacks an ``(initial, max)`` pair argument, or raises ArgumentError."""
    if not isinstance(value, tuple) or len(value) != 2:
        raise ArgumentError(f"{name} must be a pair (initial, max) of timedeltas")
    return value


class JobConfig:
    """Fluent per-job-type configuration on a client, the highest precedence level (R-3).

    Obtained from ``client.configure_job(PayloadType)``; every method checks its
    arguments at once (raising ``ArgumentError``) and returns the builder::

        client.configure_job(BuildReport).with_execution_timeout(timedelta(minutes=2))
    """

    def __init__(self) -> None:
        self._layer = SettingsLayer()
        self._queue: str | None = None
        self._priority: int | None = None

    @property
    def layer(self) -> SettingsLayer:
        """The settings this builder set."""
        return self._layer

    @property
    def queue(self) -> str | None:
        """The queue this builder set, if any."""
        return self._queue

    @property
    def priority(self) -> int | None:
        """The priority this builder set, if any."""
        return self._priority

    def _set(self, **changes: object) -> JobConfig:
        self._layer = replace(self._layer, **changes).checked()  # type: ignore[arg-type]
        return self

    def with_max_executions(self, max_executions: int) -> JobConfig:
        """Sets how many started runs the job may use, 1-100 (R-1)."""
        check_count("max_executions", max_executions)
        return self._set(max_executions=max_executions)

    def with_retry_delay(self, initial: timedelta, maximum: timedelta) -> JobConfig:
        """Sets the retry delay pair: whole ms, 1 ms-24 h, initial <= max (R-2)."""
        check_delay_pair("retry", initial, maximum)
        return self._set(retry_initial_delay=initial, retry_max_delay=maximum)

    def with_execution_timeout(self, timeout: timedelta) -> JobConfig:
        """Sets the execution timeout: whole ms, at most 30 days (R-7)."""
        if timeout is None:
            raise ArgumentError("execution_timeout must be a timedelta; use without_execution_timeout()")
        check_timeout(timeout)
        return self._set(execution_timeout=timeout, no_execution_timeout=False)

    def without_execution_timeout(self) -> JobConfig:
        """Removes any execution timeout set by a lower level or the coordinator (R-7)."""
        return self._set(execution_timeout=None, no_execution_timeout=True)

    def with_max_unstarted_abandonments(self, count: int) -> JobConfig:
        """Sets how many consecutive unstarted claims fail the job, 1-100 (R-4)."""
        check_count("max_unstarted_abandonments", count)
        return self._set(max_unstarted_abandonments=count)

    def with_unstarted_recovery_delay(self, initial: timedelta, maximum: timedelta) -> JobConfig:
        """Sets the re-queue delay pair after unstarted claims (R-4)."""
        check_delay_pair("unstarted", initial, maximum)
        return self._set(unstarted_initial_delay=initial, unstarted_max_delay=maximum)

    def with_queue(self, queue: str) -> JobConfig:
        """Sets the queue jobs of this type go to (an enqueue argument still wins)."""
        if not isinstance(queue, str) or not queue:
            raise ArgumentError("queue must be a non-empty str")
        self._queue = queue
        return self

    def with_priority(self, priority: int) -> JobConfig:
        """Sets the priority of jobs of this type; higher runs first within a queue."""
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ArgumentError(f"priority must be an int, got {type(priority).__name__}")
        self._priority = priority
        return self
