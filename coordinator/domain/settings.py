"""Retry and timeout settings, their validation and precedence (R-1 to R-4, R-7).

A job's settings are resolved once, at enqueue, from up to four layers, later wins:
library defaults < coordinator ``JobDefaults`` < the job type's declaration (decorator)
< fluent per-job configuration. The client merges the last two before sending; the
coordinator fills what is still unset (R-3). The result is copied onto the job.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

MS_PER_SECOND = 1_000
MS_PER_HOUR = 3_600 * MS_PER_SECOND
MS_PER_DAY = 24 * MS_PER_HOUR

MAX_EXECUTIONS_RANGE = (1, 100)
MAX_UNSTARTED_RANGE = (1, 100)
DELAY_RANGE_MS = (1, MS_PER_DAY)
MAX_EXECUTION_TIMEOUT_MS = 30 * MS_PER_DAY

DEFAULT_LEASE_MS = 60 * MS_PER_SECOND
"""A worker stream's lease when its Hello names none: each claim and heartbeat holds a
job this long (R-4, R-5)."""
LEASE_RANGE_MS = (100, MS_PER_DAY)
"""The leases a worker may ask for, in its Hello or a heartbeat."""


def describe_ms(ms: int) -> str:
    """``ms`` as a bound's message says it, in the largest unit it is whole in:
    ``24 h``, ``60 s``, ``100 ms``. Messages derive their bounds' text with it, so the
    text cannot drift from the bound."""
    for size, unit in ((MS_PER_HOUR, "h"), (60 * MS_PER_SECOND, "min"), (MS_PER_SECOND, "s")):
        if ms and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


class SettingsError(ValueError):
    """A setting is out of its range; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class JobSettings:
    """The effective settings copied onto a job at enqueue."""

    max_executions: int = 3
    """Started runs allowed per generation, 1-100 (R-1)."""
    retry_initial_delay_ms: int = 5 * MS_PER_SECOND
    """First retry's nominal delay (R-2)."""
    retry_max_delay_ms: int = 60 * MS_PER_SECOND
    """Cap of the nominal retry delay (R-2)."""
    execution_timeout_ms: int | None = None
    """Worker-side run timeout; None means none (R-7)."""
    max_unstarted_abandonments: int = 5
    """Consecutive unstarted claims before ``reservation_abandonment_exhausted`` (R-4)."""
    unstarted_initial_delay_ms: int = 1 * MS_PER_SECOND
    """First re-queue delay after an unstarted claim lapses (R-4)."""
    unstarted_max_delay_ms: int = 30 * MS_PER_SECOND
    """Cap of the unstarted re-queue delay (R-4)."""

    def validate(self) -> JobSettings:
        """Returns self, or raises SettingsError naming the first bad field."""
        _check_range("max_executions", self.max_executions, MAX_EXECUTIONS_RANGE)
        _check_range("max_unstarted_abandonments", self.max_unstarted_abandonments, MAX_UNSTARTED_RANGE)
        _check_delay_pair("retry", self.retry_initial_delay_ms, self.retry_max_delay_ms)
        _check_delay_pair("unstarted", self.unstarted_initial_delay_ms, self.unstarted_max_delay_ms)
        timeout = self.execution_timeout_ms
        if timeout is not None and not 1 <= timeout <= MAX_EXECUTION_TIMEOUT_MS:
            raise SettingsError("execution_timeout", f"must be 1 ms to 30 days, got {timeout} ms")
        return self


@dataclass(frozen=True, slots=True)
class SettingsLayer:
    """One precedence layer: None leaves a field to the layers below.

    ``execution_timeout_ms`` is tri-state: None inherits, a number sets, and
    ``clear_execution_timeout`` removes an inherited timeout (``without_execution_timeout``).
    """

    max_executions: int | None = None
    retry_initial_delay_ms: int | None = None
    retry_max_delay_ms: int | None = None
    execution_timeout_ms: int | None = None
    clear_execution_timeout: bool = False
    max_unstarted_abandonments: int | None = None
    unstarted_initial_delay_ms: int | None = None
    unstarted_max_delay_ms: int | None = None

    def over(self, base: SettingsLayer) -> SettingsLayer:
        """Returns this layer laid over ``base`` (this one wins where it is set)."""
        merged = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in merged.items():
            if value is None:
                merged[name] = getattr(base, name)
        if self.execution_timeout_ms is not None:
            merged["clear_execution_timeout"] = False
        elif self.clear_execution_timeout:
            merged["execution_timeout_ms"] = None
            merged["clear_execution_timeout"] = True
        else:
            merged["clear_execution_timeout"] = base.clear_execution_timeout
        return SettingsLayer(**merged)


def resolve_settings(*layers: SettingsLayer, base: JobSettings | None = None) -> JobSettings:
    """Resolves layers, lowest precedence first, over ``base`` (library defaults).

    Raises SettingsError when the result is out of range.
    """
    settings = base or JobSettings()
    for layer in layers:
        changes = {
            f.name: getattr(layer, f.name)
            for f in fields(layer)
            if f.name != "clear_execution_timeout" and getattr(layer, f.name) is not None
        }
        if layer.clear_execution_timeout and layer.execution_timeout_ms is None:
            changes["execution_timeout_ms"] = None
        settings = replace(settings, **changes)
    return settings.validate()


def _check_range(name: str, value: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not low <= value <= high:
        raise SettingsError(name, f"must be {low} to {high}, got {value}")


def _check_delay_pair(prefix: str, initial_ms: int, max_ms: int) -> None:
    low, high = DELAY_RANGE_MS
    for name, value in ((f"{prefix}_initial_delay", initial_ms), (f"{prefix}_max_delay", max_ms)):
        if not low <= value <= high:
            raise SettingsError(name, f"must be {describe_ms(low)} to {describe_ms(high)}, got {value} ms")
    if initial_ms > max_ms:
        raise SettingsError(
            f"{prefix}_initial_delay", f"initial delay {initial_ms} ms exceeds max delay {max_ms} ms"
        )
