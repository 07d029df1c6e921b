"""The worker's Prometheus metrics (docs/metrics.md), on the host service's registry by default.

Every ``Worker`` on one registry shares one set of metrics (a registry refuses the same
name twice), so a process with several workers reports their sum. Labels are bounded:
queue, wire_name and outcome; never job or attempt IDs, never error text.

prometheus_client loads here on first use (a ``Worker`` is made), not at ``import
worker_sdk``: its package import costs about as much as the rest of the SDK's.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

HANDLER_BUCKETS_S = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)
"""From no-op handlers to hours-long jobs."""
NO_RESULT = "no_result"
"""The outcome label of runs that end without a report (lost attempt, ignored timeout)."""

_lock = threading.Lock()
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, WorkerMetrics] = weakref.WeakKeyDictionary()


class WorkerMetrics:
    """The SDK metrics registered on one registry; get them with ``for_registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.jobs = Counter(
            "runwick_worker_jobs_total",
            "Runs this process finished, by outcome (succeeded, retryable_failure, "
            "timed_out, ...; no_result: nothing was reported).",
            ["queue", "wire_name", "outcome"],
            registry=registry,
        )
        self.handler_duration = Histogram(
            "runwick_worker_handler_duration_seconds",
            "Time from a run's start to its report: decoding, middleware and handler.",
            ["queue", "wire_name", "outcome"],
            buckets=HANDLER_BUCKETS_S,
            registry=registry,
        )
        self.in_flight = Gauge(
            "runwick_worker_jobs_in_flight",
            "Handlers running now.",
            ["queue", "wire_name"],
            registry=registry,
        )
        self.heartbeat_failures = Counter(
            "runwick_worker_heartbeat_failures_total",
            "Heartbeats that could not be sent (no stream) or went unanswered (the stream "
            "is then restarted).",
            ["reason"],
            registry=registry,
        )
        self.lease_lapsed_starts = Counter(
            "runwick_worker_lease_lapsed_starts_total",
            "Starts granted when the claim's lease had already lapsed by the worker's clock "
            "(the process was paused): the handler was not called and no result was sent.",
            ["queue", "wire_name"],
            registry=registry,
        )
        self.reconnects = Counter(
            "runwick_worker_reconnects_total",
            "Connection attempts after a stream to the coordinator ended or failed.",
            registry=registry,
        )
        self.connected = Gauge(
            "runwick_worker_connected_streams",
            "Streams to a coordinator that are open and welcomed (one per connected Worker).",
            registry=registry,
        )

        self._in_flight_series: dict[tuple[str, str], Gauge] = {}
        self._finished_series: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}

    # ``labels()`` checks and converts its arguments and takes a lock on every call: per
    # run that cost more than the updates themselves (a tenth of a worker's CPU for a
    # no-op job). The series of the runs' metrics are looked up once each instead; their
    # labels are bounded by the job types and queues the worker serves.

    def run_in_flight(self, queue: str, wire_name: str) -> Gauge:
        """``in_flight``'s series of a queue and job type."""
        key = (queue, wire_name)
        series = self._in_flight_series.get(key)
        if series is None:
            series = self._in_flight_series[key] = self.in_flight.labels(queue, wire_name)
        return series

    def run_finished(self, queue: str, wire_name: str, outcome: str, elapsed_s: float) -> None:
        """Counts a finished run and observes its duration."""
        key = (queue, wire_name, outcome)
        series = self._finished_series.get(key)
        if series is None:
            series = self._finished_series[key] = (self.jobs.labels(*key), self.handler_duration.labels(*key))
        finished, duration = series
        finished.inc()
        duration.observe(elapsed_s)

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> WorkerMetrics:
        """The metrics on ``registry`` (prometheus_client's default one when None)."""
        target = default_registry() if registry is None else registry
        with _lock:
            metrics = _by_registry.get(target)
            if metrics is None:
                metrics = _by_registry[target] = cls(target)
            return metrics


def default_registry() -> CollectorRegistry:
    """prometheus_client's default registry (what the host service exposes), imported now."""
    from prometheus_client import REGISTRY

    return REGISTRY
