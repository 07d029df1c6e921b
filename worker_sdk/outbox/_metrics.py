"""The relay's Prometheus metrics (docs/outbox.md), on the host's registry by default.

Relays on one registry share one set (a registry refuses the same name twice), labelled
by outbox table: a process relaying two tables reports each. No job IDs or error text.
"""

from __future__ import annotations

import threading
import weakref

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, RelayMetrics] = weakref.WeakKeyDictionary()


class RelayMetrics:
    """The outbox relay's metrics on one registry; get them with ``for_registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.pending = Gauge(
            "runwick_outbox_pending_rows",
            "Committed outbox rows not yet relayed (rows moved aside as failed are not counted).",
            ["table"],
            registry=registry,
        )
        self.oldest_age = Gauge(
            "runwick_outbox_oldest_pending_age_seconds",
            "Age of the oldest pending outbox row, by its writer's clock (0 when none waits).",
            ["table"],
            registry=registry,
        )
        self.relayed = Counter(
            "runwick_outbox_relayed_total",
            "Outbox rows the coordinator acknowledged and this process deleted.",
            ["table"],
            registry=registry,
        )
        self.failed = Counter(
            "runwick_outbox_failed_total",
            "Outbox rows the coordinator refused for good (INVALID_ARGUMENT and the like), "
            "or that held no job: moved aside with failed_at_ms and error set.",
            ["table"],
            registry=registry,
        )
        self.send_errors = Counter(
            "runwick_outbox_send_errors_total",
            "Batches not relayed for a passing reason (coordinator or database unavailable); "
            "their rows wait and are sent again after a backoff.",
            ["table"],
            registry=registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> RelayMetrics:
        """The metrics on ``registry`` (prometheus_client's default one when None)."""
        target = REGISTRY if registry is None else registry
        with _lock:
            metrics = _by_registry.get(target)
            if metrics is None:
                metrics = _by_registry[target] = cls(target)
            return metrics
