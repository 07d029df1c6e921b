"""The relay's tunables."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from worker_sdk._errors import ArgumentError
from worker_sdk.outbox._rows import DEFAULT_NOTIFY_CHANNEL

MAX_BATCH_SIZE = 500
"""The coordinator's default ``max_enqueue_batch``: a larger batch would be refused."""
_CHANNEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
"""A PostgreSQL identifier that needs no quoting care (at most 63 bytes)."""


_SECONDS_FIELDS = (
    "poll_interval_s",
    "backoff_initial_s",
    "backoff_max_s",
    "rpc_timeout_s",
    "backlog_interval_s",
)


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """How an ``OutboxRelay`` works. Every field has a default that suits production."""

    batch_size: int = 100
    """Rows sent in one ``Enqueue`` call, 1-500 (the coordinator's ``max_enqueue_batch``)."""
    poll_interval_s: float = 0.5
    """How often an idle relay looks for rows without a notification (the only way on
    SQLite; on PostgreSQL a safety net behind LISTEN/NOTIFY)."""
    backoff_initial_s: float = 0.1
    """First wait after a failed batch (coordinator or database unavailable)."""
    backoff_max_s: float = 5.0
    """The wait doubles after each failure in a row, up to this."""
    rpc_timeout_s: float = 10.0
    """Deadline of one ``Enqueue`` call. On PostgreSQL the batch's rows stay locked
    meanwhile, so keep it under the database's ``idle_in_transaction_session_timeout``."""
    backlog_interval_s: float = 5.0
    """How often the pending-rows and oldest-age gauges are refreshed (one COUNT query)."""
    notify_channel: str = DEFAULT_NOTIFY_CHANNEL
    """The PostgreSQL channel to LISTEN on; the same as the writers' ``Outbox``."""
    listen: bool = True
    """Use LISTEN/NOTIFY on PostgreSQL (psycopg); False polls there too."""

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int):
            raise ArgumentError(f"batch_size must be an int, got {self.batch_size!r}")
        if not 1 <= self.batch_size <= MAX_BATCH_SIZE:
            raise ArgumentError(f"batch_size must be 1-{MAX_BATCH_SIZE}, got {self.batch_size}")
        for name in (
            "poll_interval_s",
            "backoff_initial_s",
            "backoff_max_s",
            "rpc_timeout_s",
            "backlog_interval_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ArgumentError(f"{name} must be a finite number of seconds, got {value!r}")
            if value <= 0 or value > 3600:
                raise ArgumentError(f"{name} must be more than 0 and at most 3600 s, got {value}")
        if self.backoff_initial_s > self.backoff_max_s:
            raise ArgumentError("backoff_initial_s must not exceed backoff_max_s")
        if not isinstance(self.notify_channel, str) or not _CHANNEL.fullmatch(self.notify_channel):
            raise ArgumentError(
                f"notify_channel must be letters, digits and _ (not first a digit), at most 63, "
                f"got {self.notify_channel!r}"
            )

    def next_backoff(self, current_s: float) -> float:
        """The wait after one more failure in a row, from the current one."""
        return min(current_s * 2, self.backoff_max_s)
