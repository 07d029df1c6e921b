"""The phases of a ``runwick bench`` run, measured from the producer and handler side.

Every figure comes from two clocks on the bench host: the producer's just before an
enqueue call (carried in the job's payload) and the handler's when it is called and
returns (its sink line). Nothing is read from the coordinator's tables, so a local run
and a ``--target`` run report the same figures the same way.

Order of a run (``Phases.run``): workers connect and take warm-up jobs; the latency
phase enqueues jobs one by one at a steady rate into the idle workers; the queue is
paused; the backlog is loaded; the measured jobs are enqueued in batches (enqueue
throughput); the queue is resumed and the workers process them (processing throughput,
CPU per job); finally every job's run count and state are checked (exactly once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from coordinator.cli.bench import stopping
from coordinator.cli.bench.sink import BACKLOG, FIRST_WARMUP, Record, SinkReader
from coordinator.cli.bench.worker import Noop
from worker_sdk import AsyncClient, Client, ConnectionOptions, EnqueueItem, JobState

POLL_S = 0.02
BACKLOG_PRIORITY = -1
"""Backlog jobs rank below the measured ones (priority 0) in the same queue."""
BACKLOG_IN_FLIGHT = 4
"""Enqueue calls the backlog load keeps in flight at once."""
IDLE_BEFORE_LATENCY_S = 1.0
SUCCESS_CHECK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Plan:
    """What a run does (the flags)."""

    jobs: int
    batch: int
    latency_jobs: int
    rate: float
    backlog: int
    overlap: bool
    warmup: int
    queue: str
    settle_s: float
    stall_timeout_s: float
    keys: int = 0
    """Concurrency keys the measured and backlog jobs are spread over (0: none)."""
    key_limit: int | None = None
    """The queue's per-key limit while the measured jobs run (None: none)."""

    def key(self, n: int) -> str | None:
        """The concurrency key of job ``n``: keys taken in turn (docs/flow-control.md)."""
        return f"bench:{n % self.keys}" if self.keys else None

    queue_rate: tuple[int, int] | None = None
    """(count, period in ms): a rate set on the queue after the warm-up (issue 41)."""

    @property
    def latency_numbers(self) -> range:
        return range(self.latency_jobs)

    @property
    def throughput_numbers(self) -> range:
        return range(self.latency_jobs, self.latency_jobs + self.jobs)

    @property
    def warmup_numbers(self) -> range:
        return range(FIRST_WARMUP - self.warmup + 1, FIRST_WARMUP + 1)


class Stalled(Exception):
    """No handler run was recorded for ``stall_timeout_s`` while jobs were still due."""


@dataclass
class Probe:
    """Called at the edges of the processing phase (CPU readings, database processes)."""

    start: Callable[[], None] = lambda: None
    end: Callable[[], None] = lambda: None


@dataclass
class Measured:
    """The raw outcome of a run; ``report`` turns it into figures."""

    enqueue_s: float | None = None
    backlog_s: float | None = None
    latency_enqueue_s: float | None = None
    resumed_at: float | None = None
    stalled: str | None = None
    records: list[Record] = field(default_factory=list)
    job_ids: dict[int, str] = field(default_factory=dict)
    not_succeeded: int | None = None


class Phases:
    def __init__(self, plan: Plan, connection: ConnectionOptions, sink: SinkReader) -> None:
        self.plan = plan
        self.connection = connection
        self.sink = sink
        self.measured = Measured()

    # -- waiting on the sink ---------------------------------------------------------

    def wait_for(
        self, numbers: Collection[int], what: str, on_done: Callable[[], None] = lambda: None
    ) -> None:
        """Polls the sink until every number in ``numbers`` has run once; raises Stalled
        when nothing new was recorded for ``stall_timeout_s``."""
        wanted = set(numbers)
        seen = {record.n for record in self.sink.records if record.n in wanted}
        last_progress = time.monotonic()
        while len(seen) < len(wanted):
            added = self.sink.poll()
            if added:
                last_progress = time.monotonic()
                seen.update(record.n for record in self.sink.records[-added:] if record.n in wanted)
            elif time.monotonic() - last_progress > self.plan.stall_timeout_s:
                raise Stalled(
                    f"{what}: {len(wanted) - len(seen)} of {len(wanted)} jobs not run after "
                    f"{self.plan.stall_timeout_s:g} s without progress"
                )
            else:
                stopping.pause(POLL_S)
        on_done()

    # -- the phases -------------------------------------------------------------------

    def warm_up(self, client: Client) -> None:
        items = [EnqueueItem(Noop(n, time.time()), queue=self.plan.queue) for n in self.plan.warmup_numbers]
        ids = client.enqueue_many(items)
        self.measured.job_ids.update(zip(self.plan.warmup_numbers, ids, strict=True))
        self.wait_for(self.plan.warmup_numbers, "warm-up (are workers connected to the target?)")
        stopping.pause(IDLE_BEFORE_LATENCY_S)  # the workers go idle: the latency phase finds them waiting

    def latency(self, client: Client) -> None:
        """One job per call at ``rate`` per second, on an absolute schedule (no drift)."""
        numbers = self.plan.latency_numbers
        if not numbers:
            return
        began = time.monotonic()
        for index, n in enumerate(numbers):
            delay = began + index / self.plan.rate - time.monotonic()
            if delay > 0:
                stopping.pause(delay)
            self.measured.job_ids[n] = client.enqueue(Noop(n, time.time()), queue=self.plan.queue)
        self.measured.latency_enqueue_s = time.monotonic() - began
        self.wait_for(numbers, "latency phase")

    def load_backlog(self) -> None:
        if self.plan.backlog <= 0:
            return
        began = time.monotonic()
        asyncio.run(self._load_backlog())
        self.measured.backlog_s = time.monotonic() - began

    async def _load_backlog(self) -> None:
        async with AsyncClient(self.connection, rpc_timeout=None) as client:
            sizes = _batches(self.plan.backlog, self.plan.batch)
            limit = asyncio.Semaphore(BACKLOG_IN_FLIGHT)

            async def send(size: int) -> None:
                async with limit:
                    now = time.time()
                    await client.enqueue_many(
                        [
                            EnqueueItem(
                                Noop(BACKLOG, now),
                                priority=BACKLOG_PRIORITY,
                                queue=self.plan.queue,
                                concurrency_key=self.plan.key(index),
                            )
                            for index in range(size)
                        ]
                    )

            await asyncio.gather(*(send(size) for size in sizes))

    def enqueue(self, client: Client) -> None:
        """The measured jobs, ``batch`` per call, one call at a time."""
        numbers = self.plan.throughput_numbers
        began = time.monotonic()
        for start in range(numbers.start, numbers.stop, self.plan.batch):
            stopping.check()
            chunk = range(start, min(start + self.plan.batch, numbers.stop))
            now = time.time()
            ids = client.enqueue_many(
                [
                    EnqueueItem(Noop(n, now), queue=self.plan.queue, concurrency_key=self.plan.key(n))
                    for n in chunk
                ]
            )
            self.measured.job_ids.update(zip(chunk, ids, strict=True))
        self.measured.enqueue_s = time.monotonic() - began

    def resume(self, client: Client, probe: Probe) -> None:
        probe.start()
        self.measured.resumed_at = time.time()
        client.resume_queue(self.plan.queue)

    def run(self, client: Client, probe: Probe, stop_workers: Callable[[], None]) -> Measured:
        """Every phase in order; a stall ends the run early (its jobs then count as lost)."""
        try:
            self.warm_up(client)
            if self.plan.queue_rate is not None:
                count, period_ms = self.plan.queue_rate
                client.set_queue_rate(self.plan.queue, count, period_ms / 1000)
            self.latency(client)
            paused = not self.plan.overlap or self.plan.backlog > 0
            if paused:
                client.pause_queue(self.plan.queue)
            if self.plan.key_limit is not None:
                client.set_queue_key_limit(self.plan.queue, self.plan.key_limit)
            self.load_backlog()
            if self.plan.overlap:
                if paused:
                    self.resume(client, probe)
                else:
                    probe.start()
                    self.measured.resumed_at = time.time()
                self.enqueue(client)
            else:
                self.enqueue(client)
                self.resume(client, probe)
            self.wait_for(self.plan.throughput_numbers, "processing phase", on_done=probe.end)
            stopping.pause(self.plan.settle_s)  # a duplicate run would show up now
        except Stalled as stall:
            self.measured.stalled = str(stall)
            probe.end()
        finally:
            stop_workers()
            self.sink.poll()
        self.measured.records = list(self.sink.records)
        patience = 0.0 if self.measured.stalled else SUCCESS_CHECK_TIMEOUT_S
        self.measured.not_succeeded = self.unsucceeded(client, self.measured.job_ids.values(), patience)
        return self.measured

    def unsucceeded(self, client: Client, job_ids: Collection[str], patience_s: float) -> int:
        """How many of ``job_ids`` the coordinator does not list as succeeded (results are
        recorded just after the handler returns, so it asks again for ``patience_s``)."""
        missing = set(job_ids)
        deadline = time.monotonic() + patience_s
        while True:
            for info in client.list_jobs(queue=self.plan.queue, state=JobState.SUCCEEDED, page_size=500):
                missing.discard(info.id)
            if not missing or time.monotonic() > deadline:
                return len(missing)
            stopping.pause(0.5)


def _batches(total: int, size: int) -> Sequence[int]:
    return [min(size, total - start) for start in range(0, total, size)]


def client_for(connection: ConnectionOptions) -> Client:
    return Client(connection, rpc_timeout=timedelta(seconds=120))
