"""Recent activity for the dashboard: throughput and failure rate over the last hour
(from the per-minute counts the count fold keeps) and the workers holding leases. Reads
only; each is bounded whatever the size of the jobs table."""

from __future__ import annotations

from coordinator.domain.activity import HOUR_MS, Throughput, throughput
from coordinator.domain.clock import Clock
from coordinator.domain.records import LeaseHolder
from coordinator.errors import InvalidArgument
from coordinator.store import Store

MAX_WINDOW_MS = 24 * HOUR_MS
"""The per-minute counts are kept for a day."""
MAX_LEASE_HOLDERS = 1_000


class ActivityService:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def throughput(self, window_ms: int = HOUR_MS, queue: str | None = None) -> Throughput:
        """Jobs that ended per minute over the last ``window_ms`` (1 minute to 1 day), over
        every queue or ``queue``'s only."""
        if not 60_000 <= window_ms <= MAX_WINDOW_MS:
            raise InvalidArgument(
                "window", f"must be 1 minute to 1 day, got {window_ms} ms", reason="OUT_OF_RANGE"
            )
        now = self.clock.now_ms()
        return throughput(self.store.finished_since(now - window_ms + 1), now, window_ms, queue=queue)

    def lease_holders(self, limit: int = 100) -> list[LeaseHolder]:
        """The workers holding reserved or running jobs, on any replica, most jobs first."""
        if not 1 <= limit <= MAX_LEASE_HOLDERS:
            raise InvalidArgument(
                "limit", f"must be 1 to {MAX_LEASE_HOLDERS}, got {limit}", reason="OUT_OF_RANGE"
            )
        return self.store.lease_holders(limit)
