"""The coordinator's Prometheus metrics, on a registry of their own (docs/metrics.md).

Names follow Prometheus' rules: base units, ``_total`` counters, ``_seconds`` histograms.
Labels are bounded: queue, wire_name, outcome, state, and the gRPC method and status code;
never job or attempt IDs, never error text. Queues and wire names are chosen by callers,
so each takes at most ``max_label_values`` distinct values (the first seen by this
process); the rest are counted under ``(other)``, a value no name can have. That alone
still lets one metric carry ``max_label_values`` squared combinations, so each metric also
keeps series for at most ``max_series`` label combinations: a queue and wire-name pair
(or a queue, for the queue gauges) past its room is counted under ``(other)`` in every
caller-chosen label. The queue gauges keep series only for queues that have jobs (or,
for connected workers, workers).

Facts are recorded where they are known: the facade hands over the ``Effects`` of every
transaction (starts, ended attempts and jobs, lease expiries, stale results) and counts
enqueues; an interceptor counts gRPC calls; the store reports write-transaction times; a
background loop refreshes the queue gauges from the database, so a scrape never runs a
query.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter as Tally
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from coordinator.domain.states import TERMINAL_STATES, JobState, Outcome
from coordinator.service.effects import Effects

M = TypeVar("M", Counter, Histogram)

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
OVERFLOW = "(other)"
"""The label value that counts every queue or wire name past ``max_label_values``; the
name grammar has no parentheses, so no real name reads so."""
OVERFLOW_PAIR = (OVERFLOW, OVERFLOW)
"""The queue and wire name of every pair a metric has no room for."""
DEFAULT_MAX_LABEL_VALUES = 100
DEFAULT_MAX_SERIES = 500
MIN_MAX_SERIES = 2 * len(Outcome)
"""The run-duration histogram gives each queue and wire-name pair a series per outcome:
below this a cap would leave it no room for any pair of its own."""


class LabelValues:
    """The values one caller-chosen label may take: the first ``limit`` distinct ones
    seen keep their own series, later ones become ``OVERFLOW``. Values are never let go:
    a counter's series lives as long as the process."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a label needs room for at least 1 value, got {limit}")
        self.limit = limit
        self._admitted: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._admitted:
            return value
        with self._lock:
            if value in self._admitted or len(self._admitted) < self.limit:
                self._admitted.add(value)
                return value
        return OVERFLOW


class SeriesCap:
    """The label combinations (keys) one metric keeps series of its own for: the first
    ``limit`` distinct keys seen are admitted, later ones are not and the caller counts
    them under its overflow key. A key made only of ``OVERFLOW`` values is that overflow
    key: always admitted, never taking room. Keys are never let go, as in ``LabelValues``."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a metric needs room for at least 1 series, got {limit}")
        self.limit = limit
        self._admitted: set[Hashable] = set()
        self._lock = threading.Lock()

    @classmethod
    def for_metric(cls, max_series: int, series_per_key: int) -> SeriesCap:
        """The cap of a metric whose every key has up to ``series_per_key`` series (one
        per outcome, say), leaving room for the overflow key's: at most ``max_series``
        series in all."""
        return cls(max_series // series_per_key - 1)

    def admits(self, key: tuple[str, ...]) -> bool:
        if key in self._admitted or all(part == OVERFLOW for part in key):
            return True
        with self._lock:
            if key in self._admitted or len(self._admitted) < self.limit:
                self._admitted.add(key)
                return True
        return False


class _Series(Generic[M]):
    """A labelled metric's series by their label values, each looked up once:
    ``labels()`` checks and converts its arguments and takes a lock on every call,
    which cost more than the increment it was for, several times a job. The values are
    bounded already (``LabelValues``, ``SeriesCap``), so this holds as many series as the
    metric does; only metrics whose series are never removed go through it."""

    __slots__ = ("_metric", "_series")

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._series: dict[tuple[str, ...], M] = {}

    def __call__(self, *labels: str) -> M:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = self._metric.labels(*labels)
        return series


class CoordinatorMetrics:
    """Every coordinator metric, registered on ``registry`` (a fresh one by default);
    queue and wire-name labels take at most ``max_label_values`` values each, and no
    metric has more than ``max_series`` series (label combinations)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
        max_series: int = DEFAULT_MAX_SERIES,
    ) -> None:
        if max_series < MIN_MAX_SERIES:
            raise ValueError(f"max_series must be at least {MIN_MAX_SERIES}, got {max_series}")
        self.registry = registry if registry is not None else CollectorRegistry()
        self.queue_label = LabelValues(max_label_values)
        self.wire_name_label = LabelValues(max_label_values)
        self.max_series = max_series
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
            "From an execution's start to its reported result, by outcome (succeeded, "
            "retryable_failure, timed_out, abandoned, ...); the _count counts executions by outcome.",
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
            "Claims whose lease lapsed before the coordinator allowed the handler to start: "
            "the job is offered again and no execution is spent.",
            ["queue", "wire_name"],
            registry=r,
        )
        self.stale_results = Counter(
            "runwick_stale_results_total",
            "Results acknowledged but ignored: their attempt had already ended or been "
            "superseded (a worker reporting after its lease lapsed).",
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
        self.queue_paused = Gauge(
            "runwick_queue_paused",
            "1 while a queue is paused on purpose (its jobs wait and age), else 0; per queue "
            "with jobs, like the depth gauges.",
            ["queue"],
            registry=r,
        )
        self.queue_desired_slots = Gauge(
            "runwick_queue_desired_slots",
            "Worker slots a queue wants: its reserved and running jobs plus its available ones "
            "that no control holds back (none while paused), per queue with jobs like the depth "
            "gauges; what an HPA scales workers by (docs/autoscaling.md).",
            ["queue"],
            registry=r,
        )
        self.queue_held_back = Gauge(
            "runwick_queue_held_back_jobs",
            "Available jobs a queue's controls hold back now, per queue and kind of control "
            "(queue_paused, queue_limit, key_limit, rate; docs/metrics.md); never a series per key.",
            ["queue", "kind"],
            registry=r,
        )
        self._held_keys: set[tuple[str, str]] = set()
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
        self._enqueued = _Series(self.jobs_enqueued)
        self._completed = _Series(self.jobs_completed)
        self._waited = _Series(self.job_wait)
        self._ran = _Series(self.job_run)
        self._expired = _Series(self.leases_expired)
        self._abandoned = _Series(self.unstarted_abandonments)
        # Each metric's own room for queue and wire-name pairs: a pair's series multiply
        # by the outcomes a metric splits them by, so those metrics have room for fewer.
        self._enqueued_pairs = SeriesCap.for_metric(max_series, 1)
        self._completed_pairs = SeriesCap.for_metric(max_series, len(TERMINAL_STATES))
        self._waited_pairs = SeriesCap.for_metric(max_series, 1)
        self._ran_pairs = SeriesCap.for_metric(max_series, len(Outcome))
        self._lapsed_pairs = SeriesCap.for_metric(max_series, 1)
        """Shared by the lease-expiry and unstarted-abandonment counters: the second
        counts a part of the first, so both keep series for the same pairs."""
        self._worker_queues_cap = SeriesCap.for_metric(max_series, 1)
        self._stats_queues_cap = SeriesCap.for_metric(max_series, len(OPEN_STATES))
        """Shared by the depth and oldest-age gauges, which have series for the same queues."""
        self._rpc_codes_cap = SeriesCap.for_metric(max_series, 1)
        self._rpc_methods_cap = SeriesCap.for_metric(max_series, 1)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self._worker_queues: set[str] = set()
        self._depth_keys: set[tuple[str, str]] = set()
        self._age_queues: set[str] = set()

    # -- facts ---------------------------------------------------------------------

    def _pair(self, cap: SeriesCap, queue: str, wire_name: str) -> tuple[str, str]:
        """The labels a job of ``queue`` and ``wire_name`` is counted under in the metric
        that ``cap`` bounds."""
        pair = (self.queue_label(queue), self.wire_name_label(wire_name))
        return pair if cap.admits(pair) else OVERFLOW_PAIR

    def _queue(self, cap: SeriesCap, queue: str) -> str:
        mapped = self.queue_label(queue)
        return mapped if cap.admits((mapped,)) else OVERFLOW

    def enqueued_many(self, jobs: Iterable[tuple[str, str]]) -> None:
        """Counts new jobs given as ``(queue, wire_name)``: one increment per series."""
        counts: Tally[tuple[str, str]] = Tally()
        for (queue, wire_name), count in Tally(jobs).items():
            counts[self._pair(self._enqueued_pairs, queue, wire_name)] += count
        for pair, count in counts.items():
            self._enqueued(*pair).inc(count)

    def completed(self, queue: str, wire_name: str, state: JobState) -> None:
        self._completed(*self._pair(self._completed_pairs, queue, wire_name), state.value).inc()

    def observe(self, effects: Effects) -> None:
        """Records what one transaction did (a worker batch, an operator action, a
        maintenance pass): counters once per series, histograms once per value, and
        each series looked up once per transaction (a batch's jobs mostly share their
        queue and type: 3.2-3.7 -> 2.0 us a job for a batch of 93 started and ended)."""
        pair = self._pair
        waits: dict[tuple[str, str], Histogram] = {}
        for started in effects.started:
            key = (started.queue, started.wire_name)
            waited = waits.get(key)
            if waited is None:
                waited = waits[key] = self._waited(*pair(self._waited_pairs, *key))
            waited.observe(started.waited_ms / 1000)
        ended_jobs = Tally((f.queue, f.wire_name, f.state) for f in effects.finished)
        finished: Tally[tuple[str, str, str]] = Tally()
        for (queue, wire_name, state), count in ended_jobs.items():
            finished[(*pair(self._completed_pairs, queue, wire_name), state.value)] += count
        for labels, count in finished.items():  # pairs past the cap share one series
            self._completed(*labels).inc(count)
        runs: dict[tuple[str, str, Outcome], Histogram] = {}
        for ended in effects.ended:
            if ended.ran_ms is not None:
                run_key = (ended.queue, ended.wire_name, ended.outcome)
                ran = runs.get(run_key)
                if ran is None:
                    ran_pair = pair(self._ran_pairs, ended.queue, ended.wire_name)
                    ran = runs[run_key] = self._ran(*ran_pair, ended.outcome.value)
                ran.observe(ended.ran_ms / 1000)
            if ended.lease_lapsed:
                lapsed = pair(self._lapsed_pairs, ended.queue, ended.wire_name)
                self._expired(*lapsed).inc()
                if ended.outcome is Outcome.UNSTARTED_ABANDONED:
                    self._abandoned(*lapsed).inc()
        stale = effects.stale_result_count()
        if stale:
            self.stale_results.inc(stale)

    def transaction(self, seconds: float) -> None:
        self.store_transaction.observe(seconds)

    def rpc(self, method: str, code: str, seconds: float | None) -> None:
        # Methods and codes come from the server's own lists: these caps are a backstop.
        counted = (method, code) if self._rpc_codes_cap.admits((method, code)) else OVERFLOW_PAIR
        self.grpc_handled.labels(*counted).inc()
        if seconds is not None:
            timed = method if self._rpc_methods_cap.admits((method,)) else OVERFLOW
            self.grpc_handling.labels(timed).observe(seconds)

    def workers(self, queues_by_session: Iterable[Iterable[str]]) -> None:
        """Sets the connected-workers gauge from the sessions' queue lists; a queue no
        worker serves any more loses its series."""
        counts: dict[str, int] = {}
        for queues in queues_by_session:
            for queue in {self._queue(self._worker_queues_cap, name) for name in queues}:
                counts[queue] = counts.get(queue, 0) + 1
        for queue in self._worker_queues - counts.keys():
            self._remove(self.connected_workers, queue)
        for queue, count in counts.items():
            self.connected_workers.labels(queue).set(count)
        self._worker_queues = set(counts)

    def queue_stats(
        self,
        depths: Mapping[tuple[str, str], int],
        oldest_due_ms: Mapping[str, int],
        now_ms: int,
        paused: frozenset[str] = frozenset(),
        held: Mapping[tuple[str, str], int] | None = None,
        runnable: Mapping[str, int] | None = None,
    ) -> None:
        """Sets the queue gauges from one background read. A queue with jobs in any
        non-terminal state has a series per such state (0 where it has none); a queue
        without jobs has none, and one that had loses them. ``paused`` names the paused
        queues: alerts on a queue's backlog leave those out. ``held``: the available jobs
        each kind of control holds back, per queue; ``runnable``: of a queue with a
        control, its due jobs the controls let run now (``domain.backlog``)."""
        self.held_back(held or {})
        # Sorted, so the queues that get their own series do not depend on dict order.
        cap = self._stats_queues_cap
        for queue in sorted({queue for queue, _ in depths} | set(oldest_due_ms)):
            self._queue(cap, queue)
        counts: dict[tuple[str, str], int] = {}
        for (queue, state), count in depths.items():
            if count > 0:
                key = (self._queue(cap, queue), state)
                counts[key] = counts.get(key, 0) + count
        ages_s: dict[str, float] = {}
        for queue, run_at in oldest_due_ms.items():
            mapped = self._queue(cap, queue)
            ages_s[mapped] = max(ages_s.get(mapped, 0.0), max(now_ms - run_at, 0) / 1000)
        queues = {queue for queue, _ in counts} | set(ages_s)
        keys = {(queue, state) for queue in queues for state in OPEN_STATES}
        for queue, state in keys:
            self.queue_depth.labels(queue, state).set(counts.get((queue, state), 0))
        for queue, state in self._depth_keys - keys:
            self._remove(self.queue_depth, queue, state)
        self._depth_keys = keys
        # The overflow series stands for many queues: paused only when all of them are.
        all_paused: dict[str, bool] = {}
        for queue in {queue for queue, _ in depths} | set(oldest_due_ms):
            mapped = self._queue(cap, queue)
            all_paused[mapped] = all_paused.get(mapped, True) and queue in paused
        slots = self._desired_slots(depths, paused, runnable or {}, cap)
        for queue in queues:
            self.oldest_available_age.labels(queue).set(ages_s.get(queue, 0.0))
            self.queue_paused.labels(queue).set(1 if all_paused.get(queue) else 0)
            self.queue_desired_slots.labels(queue).set(slots.get(queue, 0))
        for queue in self._age_queues - queues:
            self._remove(self.oldest_available_age, queue)
            self._remove(self.queue_paused, queue)
            self._remove(self.queue_desired_slots, queue)
        self._age_queues = queues
        self.queue_stats_refreshed.set(time.time())

    def held_back(self, held: Mapping[tuple[str, str], int]) -> None:
        """Sets the held-back gauge: a series per queue with a control and available jobs
        (the queue label capped like the depth gauges') and kind of control it has."""
        cap = self._stats_queues_cap
        counts: dict[tuple[str, str], int] = {}
        for (queue, kind), count in held.items():
            key = (self._queue(cap, queue), kind)
            counts[key] = counts.get(key, 0) + count
        for key, count in counts.items():
            self.queue_held_back.labels(*key).set(count)
        for key in self._held_keys - counts.keys():
            self._remove(self.queue_held_back, *key)
        self._held_keys = set(counts)

    def _desired_slots(
        self,
        depths: Mapping[tuple[str, str], int],
        paused: frozenset[str],
        runnable: Mapping[str, int],
        cap: SeriesCap,
    ) -> dict[str, int]:
        """The scaler's number with no horizon (``api.scaler``), from the same counts:
        leased jobs always; available ones unless the queue is paused, and of a queue
        with a control only those it lets run now (``runnable``)."""
        slots: dict[str, int] = {}
        for (queue, state), count in depths.items():
            if state in (JobState.RESERVED.value, JobState.RUNNING.value):
                wanted = count
            elif state == JobState.AVAILABLE.value:
                wanted = 0 if queue in paused else runnable.get(queue, count)
            else:
                continue
            mapped = self._queue(cap, queue)
            slots[mapped] = slots.get(mapped, 0) + wanted
        return slots

    @staticmethod
    def _remove(metric: Gauge, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # never set
            metric.remove(*labels)
