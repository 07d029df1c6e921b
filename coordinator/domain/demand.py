"""Worker slots a queue wants now: what autoscalers (KEDA's external scaler, an HPA on the
Prometheus gauge) scale workers by (docs/autoscaling.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DemandTarget:
    """What a scaler asks about: one queue, optionally only some wire names, and how far
    ahead scheduled jobs count."""

    queue: str
    wire_names: tuple[str, ...] = ()
    """Only jobs of these wire names count; empty: every job of the queue."""
    horizon_ms: int = 0
    """Scheduled jobs due within this long from now count as if due now."""


@dataclass(frozen=True, slots=True)
class SlotDemand:
    """A queue's jobs that want a worker slot, each count read from the database (so every
    replica answers the same) and capped (``capped``) so that a count costs a bounded read."""

    leased: int
    """Jobs reserved or running: their workers hold leases, so they count even while
    the queue is paused (scaling in would take their slots away)."""
    due: int
    """Jobs claimable now or within the horizon; 0 while the queue is paused."""
    paused: bool

    @property
    def slots(self) -> int:
        """The worker slots wanted: leased plus due."""
        return self.leased + self.due
