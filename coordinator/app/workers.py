"""What ``Coordinator.list_workers`` tells of one connected worker stream."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConnectedWorker:
    """A worker stream open on this replica."""

    worker_id: str
    queues: tuple[str, ...]
    wire_names: tuple[str, ...]
    capacity: int
    """The concurrency its Hello announced."""
    in_flight: int
    """Its jobs reserved or running now."""
    credit: int
    """Claims it is ready for that have not been sent."""
    connected_at_ms: int
    token_id: str | None
    host: str = ""
    """The host its Hello named; empty: not said."""
    sdk: str = ""
    """The SDK and version its Hello named (``runwick-python/0.1.0``); empty: not said."""
