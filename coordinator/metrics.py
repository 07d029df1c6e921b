"""The coordinator's Prometheus metrics, on a registry of their own (docs/metrics.md).

Names follow Prometheus' rules: base units, ``_total`` counters, ``_seconds`` histograms.
Labels are bounded: queue, wire_name, outcome, state, and the gRPC method and status code;
never job or attempt IDs, never error text.

Facts are recorded where they are known: the facade hands over the ``Effects`` of every
transaction (starts, ended attempts and jobs, lease expiries, stale results) and counts
enqueues; an interceptor counts gRPC calls; the store reports write-transaction times; a
background loop refreshes the queue gauges from the database, so a scrape never runs a
query.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)

from coordinator.domain.states import JobState, Outcome
from coordinator.service.effects import Effects

log = logging.getLogger(__name__)

WAIT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
"""Enqueue-to-start waits: milliseconds when idle workers wait, up to an hour of backlog."""
RUN_BUCKETS_S = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)
"""Run durations: from no-op handlers to hours-long jobs."""
STORE_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
"""Write transactions: sub-millisecond on SQLite, tens of milliseconds under load."""
RPC_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Unary RPCs: most take milliseconds; WaitJob may take up to its timeout."""

OPEN_STATES = tuple(state.value for state in JobState if not state.terminal)
UNKNOWN_METHOD = "unknown"
"""The method label of calls to methods the server does not have (bounded labels)."""


class CoordinatorMetrics:
    """Every coordinator metric, registered on ``registry`` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.jobs_enqueued = Counter(
            "runwick_jobs_enqueued_total",
            "Jobs created by Enqueue (an idempotency-key hit creates none).",
            ["queue", "wire_name"],
            registry=r,
        )
        self.jobs_completed = Counter(
            "runwick_jobs_completed_total",
            "Jobs that reached a terminal state, by that state: succeeded, failed or cancelled.",
            ["queue", "wire_name", "outcome"],
            registry=r,
        )
        self.job_wait = Histogram(
            "runwick_job_wait_seconds",
            "From when a job was due (enqueue, run-at or retry time) to the start of its execution.",
            ["queue", "wire_name"],
            buckets=WAIT_BUCKETS_S,
            registry=r,
        )
        self.job_run = Histogram(
            "runwick_job_run_duration_seconds",
            "From an execution's start to its reported result, by outcome (R-5); "
            "the _count counts executions by outcome.",
            ["queue", "wire_name", "outcome"],
            buckets=RUN_BUCKETS_S,
            registry=r,
        )
        self.leases_expired = Counter(
            "runwick_leases_expired_total",
            "Claims whose lease lapsed and were recovered by the coordinator, started or not.",
            ["queue", "wire_name"],
            registry=r,
        )
        self.unstarted_abandonments = Counter(
            "runwick_unstarted_abandonments_total",
            "Claims whose lease lapsed before the handler was authorized (R-4).",
            ["queue", "wire_name"],
            registry=r,
        )
        self.stale_results = Counter(
            "runwick_stale_results_total",
            "Results acknowledged as stale: from a superseded or already ended attempt (R-11).",
            registry=r,
        )
        self.connected_workers = Gauge(
            "runwick_connected_workers",
            "Worker streams connected to this coordinator, by queue they take jobs from.",
            ["queue"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "runwick_queue_depth",
            "Jobs per queue in each non-terminal state, read from the database in the background "
            "(the same on every replica).",
            ["queue", "state"],
            registry=r,
        )
        self.oldest_available_age = Gauge(
            "runwick_queue_oldest_available_job_age_seconds",
            "Age of the oldest job that is due and waiting for a worker, per queue (0 when none).",
            ["queue"],
            registry=r,
        )
        self.queue_stats_refreshed = Gauge(
            "runwick_queue_stats_refreshed_timestamp_seconds",
            "When the queue gauges were last read from the database (Unix time).",
            registry=r,
        )
        self.database_up = Gauge(
            "runwick_database_up",
            "1 when the last background database check succeeded, else 0.",
            registry=r,
        )
        self.store_transaction = Histogram(
            "runwick_store_transaction_seconds",
            "Duration of write transactions, including waiting for the SQLite write lock.",
            buckets=STORE_BUCKETS_S,
            registry=r,
        )
        self.grpc_handled = Counter(
            "runwick_grpc_server_handled_total",
            "gRPC calls completed on the API port, by method and status code.",
            ["grpc_method", "grpc_code"],
            registry=r,
        )
        self.grpc_handling = Histogram(
            "runwick_grpc_server_handling_seconds",
            "Duration of unary gRPC calls on the API port, by method.",
            ["grpc_method"],
            buckets=RPC_BUCKETS_S,
            registry=r,
        )
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self._worker_queues: set[str] = set()
        self._depth_keys: set[tuple[str, str]] = set()
        self._age_queues: set[str] = set()
        self._http: WSGIServer | None = None
        self._http_thread: threading.Thread | None = None

    # -- facts ---------------------------------------------------------------------

    def enqueued(self, queue: str, wire_name: str) -> None:
        self.jobs_enqueued.labels(queue, wire_name).inc()

    def completed(self, queue: str, wire_name: str, state: JobState) -> None:
        self.jobs_completed.labels(queue, wire_name, state.value).inc()

    def observe(self, effects: Effects) -> None:
        """Records what one transaction did (a worker batch, an operator action, a
        maintenance pass)."""
        for started in effects.started:
            self.job_wait.labels(started.queue, started.wire_name).observe(started.waited_ms / 1000)
        for finished in effects.finished:
            self.completed(finished.queue, finished.wire_name, finished.state)
        for ended in effects.ended:
            if ended.ran_ms is not None:
                self.job_run.labels(ended.queue, ended.wire_name, ended.outcome.value).observe(
                    ended.ran_ms / 1000
                )
            if ended.lease_lapsed:
                self.leases_expired.labels(ended.queue, ended.wire_name).inc()
                if ended.outcome is Outcome.UNSTARTED_ABANDONED:
                    self.unstarted_abandonments.labels(ended.queue, ended.wire_name).inc()
        stale = effects.stale_result_count()
        if stale:
            self.stale_results.inc(stale)

    def transaction(self, seconds: float) -> None:
        self.store_transaction.observe(seconds)

    def rpc(self, method: str, code: str, seconds: float | None) -> None:
        self.grpc_handled.labels(method, code).inc()
        if seconds is not None:
            self.grpc_handling.labels(method).observe(seconds)

    def workers(self, queues_by_session: Iterable[Iterable[str]]) -> None:
        """Sets the connected-workers gauge from the sessions' queue lists."""
        counts: dict[str, int] = {}
        for queues in queues_by_session:
            for queue in queues:
                counts[queue] = counts.get(queue, 0) + 1
        for queue in self._worker_queues - counts.keys():
            self.connected_workers.labels(queue).set(0)
        for queue, count in counts.items():
            self.connected_workers.labels(queue).set(count)
        self._worker_queues |= counts.keys()

    def queue_stats(
        self, depths: Mapping[tuple[str, str], int], oldest_due_ms: Mapping[str, int], now_ms: int
    ) -> None:
        """Sets the queue gauges from one background read. Queues seen before or named by
        connected workers read 0 when empty, so an idle queue has series too."""
        queues = {queue for queue, _ in depths} | set(oldest_due_ms) | {q for q, _ in self._depth_keys}
        queues |= self._worker_queues
        keys = {(queue, state) for queue in queues for state in OPEN_STATES}
        for queue, state in keys:
            self.queue_depth.labels(queue, state).set(depths.get((queue, state), 0))
        self._depth_keys = keys
        for queue in self._age_queues | set(oldest_due_ms) | queues:
            run_at = oldest_due_ms.get(queue)
            self.oldest_available_age.labels(queue).set(
                0 if run_at is None else max(now_ms - run_at, 0) / 1000
            )
        self._age_queues |= queues
        self.queue_stats_refreshed.set(time.time())

    # -- exposition ------------------------------------------------------------------

    def serve(self, host: str, port: int) -> int:
        """Serves ``/metrics`` over HTTP on a daemon thread; returns the bound port."""
        try:
            self._http, self._http_thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise OSError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
        bound = int(self._http.server_port)
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stops serving ``/metrics`` (blocks up to half a second: call it off the loop)."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
