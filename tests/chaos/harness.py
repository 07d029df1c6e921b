"""The chaos workload: real coordinator and worker processes, producers, an observer,
a nemesis, and the read-back at the end; it returns the run's history.

Topology: ``replicas`` coordinators (``runwick serve --port 0``) over one database;
``proxies`` ChaosProxy instances in this process, proxy ``i`` preferring replica
``i % replicas`` and failing over to the others; workers (``runwick worker
tests.chaos.worker_app:worker``) and producers spread over the proxies. The observer,
the manager (cancel, manual retry) and the read-back talk to the coordinators directly.

Phases: start everything; faults for ``fault_seconds`` while producers enqueue; then
the nemesis heals what it broke, producers stop, and the quiet period lasts until every
job on the coordinator has ended (or ``quiet_timeout_s``); then every job and its
attempts are read back and the processes are stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy.engine import make_url

from tests.chaos.history import History, Recorder, merge
from tests.chaos.jobs import RETRY_DELAY, UNSTARTED_DELAY, Fragile, Task
from tests.chaos.pgcluster import ThrowawayCluster
from tests.chaos.proxy import ChaosProxy
from tests.support import LISTENING, kill9, read_log, runwick_command, serve, start_process, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import (
    AsyncClient,
    AttemptInfo,
    Client,
    CoordinatorError,
    CoordinatorUnavailable,
    EnqueueItem,
    FailedPrecondition,
    JobInfo,
    JobState,
    RunwickError,
)

WORKER_APP = "tests.chaos.worker_app:worker"
DEFAULT_QUEUE = "default"
"""The workload's jobs are enqueued without a queue: all in this one."""
NOT_ENDED = (JobState.SCHEDULED, JobState.WAITING, JobState.AVAILABLE, JobState.RESERVED, JobState.RUNNING)
BACKLOG_CAP = 150
"""Producers wait while more jobs than this wait to be claimed."""

TRANSIENT = (CoordinatorUnavailable, CoordinatorError)
"""What the observer, the manager and the read-back catch, then retry if ``transient``."""


def transient(error: Exception) -> bool:
    """UNAVAILABLE (or deadline), or the CANCELLED a call racing a graceful shutdown gets
    (a known finding, see tests/chaos/test_findings.py)."""
    if isinstance(error, CoordinatorUnavailable):
        return True
    return isinstance(error, CoordinatorError) and error.status_code is grpc.StatusCode.CANCELLED


FAULT_WEIGHTS: dict[str, float] = {
    "kill9_worker": 3,
    "sigstop_worker": 2,
    "sigterm_worker": 1.5,
    "kill9_coordinator": 1,
    "sigterm_coordinator": 0.7,
    "pg_terminate": 1.5,
    "pg_restart": 1.5,
    "proxy_drop": 2,
    "proxy_delay": 1.5,
    "proxy_partition": 1.5,
}


@dataclass
class Settings:
    engine: str
    database_url: str
    workdir: Path
    seed: int
    fault_seconds: float
    replicas: int = 1
    proxies: int = 2
    workers: int = 3
    concurrency: int = 4
    producers: int = 2
    lease_ms: int = 2_000
    maintenance_s: float = 0.2
    slack_ms: int = 2_000
    clock_tol_ms: int = 250
    quiet_timeout_s: float = 90.0
    poll_interval_s: float = 0.25
    faults: dict[str, float] = field(default_factory=lambda: dict(FAULT_WEIGHTS))
    pg_cluster: ThrowawayCluster | None = None
    """The throwaway cluster ``database_url`` is on, which ``pg_restart`` restarts."""
    queue_rate: tuple[int, int] | None = None
    """(count, period in ms): a rate set on the workload's queue once it exists; the
    checker's ``queue_rate_respected`` holds the starts after it to it."""
    concurrency_keys: int = 0
    """How many concurrency keys the producers spread their jobs over (``pick_key``:
    one key takes 40% of them); 0 enqueues every job with the implicit key."""
    key_limit: int | None = None
    """A per-key running limit set on the workload's queue once it exists; the
    checker's ``key_limit_respected`` holds the claims after it to it."""
    queue_limit: int | None = None
    """A queue-wide running limit set likewise (``queue_limit_respected``)."""

    def header(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "seed": self.seed,
            "fault_seconds": self.fault_seconds,
            "replicas": self.replicas,
            "workers": self.workers,
            "lease_ms": self.lease_ms,
            "maintenance_ms": self.maintenance_s * 1000,
            "slack_ms": self.slack_ms,
            "clock_tol_ms": self.clock_tol_ms,
            "faults": self.faults,
            "throwaway_cluster": self.pg_cluster is not None,
            "queue_rate": self.queue_rate,
            "concurrency_keys": self.concurrency_keys,
            "key_limit": self.key_limit,
            "queue_limit": self.queue_limit,
        }


def ms(value: datetime | None) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


# -- processes ----------------------------------------------------------------------------


class CoordinatorProcess:
    def __init__(self, name: str, settings: Settings, recorder: Recorder) -> None:
        self.name = name
        self.settings = settings
        self.recorder = recorder
        self.log = settings.workdir / f"coordinator-{name}.log"
        self.app_name = f"runwick-chaos-{name}"
        self.process: Any = None
        self.target: str | None = None

    @property
    def up(self) -> bool:
        return self.target is not None

    async def start(self) -> None:
        settings = self.settings
        # Every start appends to the same log. Count the starts that listened, not the
        # attempts: one begun while the nemesis restarts the database exits unlistened.
        listened = read_log(self.log).count(LISTENING) if self.log.exists() else 0
        self.process = serve(
            self.log,
            *("--database-url", settings.database_url, "--port", "0"),
            *("--maintenance-interval", str(settings.maintenance_s), "--drain-timeout", "3"),
            *NO_FIXED_PORTS,
            "--insecure",
            env={**os.environ, "PGAPPNAME": self.app_name},  # pg_stat_activity.application_name
        )
        self.target = await wait_listening(self.process, self.log, count=listened + 1, timeout=60)
        self.recorder.record("coordinator_up", replica=self.name, target=self.target, pid=self.process.pid)

    async def kill9(self) -> None:
        self.recorder.record("coordinator_down", replica=self.name, pid=self.process.pid)
        self.target = None
        await kill9(self.process)

    async def terminate(self) -> None:
        """SIGTERM: the coordinator drains its workers and exits (counted down from now)."""
        self.recorder.record("coordinator_down", replica=self.name, pid=self.process.pid)
        await self.stop()

    async def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.process.wait, 20)
        except Exception:
            await kill9(self.process)
        self.target = None


class WorkerSlot:
    """One worker position: each (re)start is a new process with its own worker ID."""

    def __init__(self, name: str, proxy: ChaosProxy, settings: Settings, recorder: Recorder) -> None:
        self.name = name
        self.proxy = proxy
        self.settings = settings
        self.recorder = recorder
        self.incarnation = 0
        self.process: Any = None
        self.worker_id = ""
        self.busy = False
        """A fault is acting on this worker."""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.incarnation += 1
        self.worker_id = f"chaos-{self.name}-{self.incarnation}"
        workdir = self.settings.workdir
        env = {
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "RUNWICK_TARGET": self.proxy.target,
            "CHAOS_WORKER_ID": self.worker_id,
            "CHAOS_HISTORY": str(workdir / f"events-{self.worker_id}.jsonl"),
            "CHAOS_LEASE_MS": str(self.settings.lease_ms),
            "CHAOS_CONCURRENCY": str(self.settings.concurrency),
        }
        command = runwick_command("worker", WORKER_APP, "--log-level", "INFO")
        self.process = start_process(command, workdir / f"{self.worker_id}.log", env=env)
        self.recorder.record(
            "worker_up", worker_id=self.worker_id, proxy=self.proxy.name, pid=self.process.pid
        )

    def signal(self, signum: int) -> None:
        if self.running:
            self.process.send_signal(signum)

    async def kill9(self) -> None:
        await kill9(self.process)

    async def terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM (the worker drains) and wait; kill -9 if it hangs."""
        if not self.running:
            return
        self.process.send_signal(signal.SIGCONT)
        self.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(self.process.wait, timeout)
        except Exception:
            await kill9(self.process)


# -- the cluster --------------------------------------------------------------------------


class Cluster:
    def __init__(self, settings: Settings, recorder: Recorder) -> None:
        self.settings = settings
        self.recorder = recorder
        self.coordinators = [
            CoordinatorProcess(chr(ord("a") + i), settings, recorder) for i in range(settings.replicas)
        ]
        self.proxies = [ChaosProxy(f"p{i}", self._upstreams_for(i)) for i in range(settings.proxies)]
        self.workers = [
            WorkerSlot(f"w{i}", self.proxies[i % settings.proxies], settings, recorder)
            for i in range(settings.workers)
        ]

    def _upstreams_for(self, index: int) -> Callable[[], list[str]]:
        def upstreams() -> list[str]:
            count = len(self.coordinators)
            ordered = [self.coordinators[(index + k) % count] for k in range(count)]
            return [c.target for c in ordered if c.target is not None]

        return upstreams

    def targets(self) -> list[str]:
        return [c.target for c in self.coordinators if c.target is not None]

    async def start(self) -> None:
        for coordinator in self.coordinators:
            await coordinator.start()
        for proxy in self.proxies:
            await proxy.start()
        for worker in self.workers:
            worker.start()

    async def stop_workers(self) -> None:
        await asyncio.gather(*(w.terminate() for w in self.workers), return_exceptions=True)

    async def stop(self) -> None:
        await self.stop_workers()
        await asyncio.gather(*(c.stop() for c in self.coordinators), return_exceptions=True)
        for proxy in self.proxies:
            await proxy.close()

    def reap(self) -> None:
        """Teardown after anything: no process outlives the test."""
        for process in [w.process for w in self.workers] + [c.process for c in self.coordinators]:
            if process is not None and process.poll() is None:
                process.kill()
                with contextlib.suppress(Exception):
                    process.wait(10)


# -- the nemesis --------------------------------------------------------------------------


class Nemesis:
    """Injects faults on a schedule drawn from a seeded RNG; several may overlap, never
    two on one target, and at least one worker is always left alone."""

    def __init__(self, cluster: Cluster, rng: random.Random, recorder: Recorder) -> None:
        self.cluster = cluster
        self.settings = cluster.settings
        self.rng = rng
        self.recorder = recorder
        self.next_id = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.busy_proxies: set[str] = set()
        self.coordinator_fault = False
        self.database_fault = False
        self.ending = asyncio.Event()
        self.errors: list[str] = []

    async def run(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        while loop.time() < until:
            await asyncio.sleep(self.rng.uniform(0.6, 1.6))
            kind = self._choose()
            if kind is None:
                continue
            self.next_id += 1
            task = asyncio.create_task(self._guarded(kind, self.next_id))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _choose(self) -> str | None:
        weights = dict(self.settings.faults)
        if self.settings.engine != "postgres":
            weights.pop("pg_terminate", None)
        if self.settings.pg_cluster is None or self.database_fault:
            weights.pop("pg_restart", None)
        healthy = [w for w in self.cluster.workers if not w.busy and w.running]
        if len(healthy) <= 1:
            for kind in ("kill9_worker", "sigstop_worker", "sigterm_worker"):
                weights.pop(kind, None)
        if self.coordinator_fault:
            weights.pop("kill9_coordinator", None)
            weights.pop("sigterm_coordinator", None)
        if len(self.busy_proxies) == len(self.cluster.proxies):
            for kind in ("proxy_drop", "proxy_delay", "proxy_partition"):
                weights.pop(kind, None)
        kinds = [k for k, w in weights.items() if w > 0]
        if not kinds:
            return None
        return self.rng.choices(kinds, [weights[k] for k in kinds])[0]

    async def _hold(self, seconds: float) -> None:
        """How long a fault lasts; cut short once the fault phase is over."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ending.wait(), seconds)

    def _fault(self, fault_id: int, kind: str, **fields: Any) -> None:
        self.recorder.record("fault", id=fault_id, fault=kind, **fields)

    def _heal(self, fault_id: int, **fields: Any) -> None:
        self.recorder.record("heal", id=fault_id, **fields)

    async def _guarded(self, kind: str, fault_id: int) -> None:
        try:
            await getattr(self, kind)(fault_id)
        except Exception as error:  # a broken fault must not stop the run; it is reported
            self.errors.append(f"{kind} #{fault_id}: {type(error).__name__}: {error}")
            self.recorder.record("nemesis_error", id=fault_id, fault=kind, error=repr(error))

    def _pick_worker(self) -> WorkerSlot:
        healthy = [w for w in self.cluster.workers if not w.busy and w.running]
        worker = self.rng.choice(healthy)
        worker.busy = True
        return worker

    def _pick_proxy(self) -> ChaosProxy:
        proxy = self.rng.choice([p for p in self.cluster.proxies if p.name not in self.busy_proxies])
        self.busy_proxies.add(proxy.name)
        return proxy

    async def kill9_worker(self, fault_id: int) -> None:
        worker = self._pick_worker()
        try:
            await worker.kill9()
            self._fault(fault_id, "kill9_worker", worker_id=worker.worker_id, proxy=worker.proxy.name)
            await self._hold(self.rng.uniform(0.2, 1.5))
            worker.start()
            self._heal(fault_id, worker_id=worker.worker_id)
        finally:
            worker.busy = False

    async def sigstop_worker(self, fault_id: int) -> None:
        """Stopped longer than a lease plus a maintenance interval and the slack, so the
        checker can tell that its leases were recovered without it."""
        worker = self._pick_worker()
        settings = self.settings
        floor = (settings.lease_ms + settings.maintenance_s * 1000 + settings.slack_ms) / 1000 + 0.3
        duration = self.rng.uniform(floor, floor + 1.5)
        try:
            worker.signal(signal.SIGSTOP)
            self._fault(
                fault_id,
                "sigstop_worker",
                worker_id=worker.worker_id,
                proxy=worker.proxy.name,
                duration_ms=duration * 1000,
            )
            await self._hold(duration)
            self._heal(fault_id, worker_id=worker.worker_id)
            worker.signal(signal.SIGCONT)
        finally:
            worker.busy = False

    async def sigterm_worker(self, fault_id: int) -> None:
        worker = self._pick_worker()
        try:
            self._fault(fault_id, "sigterm_worker", worker_id=worker.worker_id, proxy=worker.proxy.name)
            await worker.terminate()
            await self._hold(self.rng.uniform(0.1, 1.0))
            worker.start()
            self._heal(fault_id, worker_id=worker.worker_id)
        finally:
            worker.busy = False

    async def kill9_coordinator(self, fault_id: int) -> None:
        self.coordinator_fault = True
        coordinator = self.rng.choice(self.cluster.coordinators)
        try:
            await coordinator.kill9()
            self._fault(fault_id, "kill9_coordinator", replica=coordinator.name)
            await self._hold(self.rng.uniform(0.3, 2.0))
            await coordinator.start()
            self._heal(fault_id, replica=coordinator.name)
        finally:
            self.coordinator_fault = False

    async def sigterm_coordinator(self, fault_id: int) -> None:
        """A graceful restart: Drain to its workers, exit, start again on the database."""
        self.coordinator_fault = True
        coordinator = self.rng.choice(self.cluster.coordinators)
        try:
            self._fault(fault_id, "sigterm_coordinator", replica=coordinator.name)
            await coordinator.terminate()
            await self._hold(self.rng.uniform(0.2, 1.0))
            await coordinator.start()
            self._heal(fault_id, replica=coordinator.name)
        finally:
            self.coordinator_fault = False

    async def pg_terminate(self, fault_id: int) -> None:
        """pg_terminate_backend of one replica's connections (or every replica's)."""
        import psycopg

        names = [c.app_name for c in self.cluster.coordinators]
        if self.rng.random() < 0.7:
            names = [self.rng.choice(names)]
        url = make_url(self.settings.database_url).set(drivername="postgresql")
        libpq = url.render_as_string(hide_password=False)

        def terminate() -> int:
            with psycopg.connect(libpq, autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = ANY(%s) "
                    "AND pid <> pg_backend_pid()",
                    (names,),
                ).fetchall()
            return sum(1 for (done,) in rows if done)

        count = await asyncio.to_thread(terminate)
        self._fault(fault_id, "pg_terminate", application_names=names, terminated=count)
        self._heal(fault_id)

    async def pg_restart(self, fault_id: int) -> None:
        """The database crashes and comes back: ``pg_ctl restart -m immediate`` of the
        throwaway cluster (never the shared server)."""
        cluster = self.settings.pg_cluster
        assert cluster is not None
        self.database_fault = True
        try:
            self._fault(fault_id, "pg_restart")
            await asyncio.to_thread(cluster.restart_immediate)
            self._heal(fault_id)
        finally:
            self.database_fault = False

    async def proxy_drop(self, fault_id: int) -> None:
        proxy = self._pick_proxy()
        try:
            dropped = proxy.drop()
            self._fault(fault_id, "proxy_drop", proxy=proxy.name, connections=dropped)
            self._heal(fault_id)
        finally:
            self.busy_proxies.discard(proxy.name)

    async def proxy_delay(self, fault_id: int) -> None:
        proxy = self._pick_proxy()
        delay_ms = self.rng.uniform(50, 600)
        try:
            proxy.delay(delay_ms)
            self._fault(fault_id, "proxy_delay", proxy=proxy.name, delay_ms=delay_ms)
            await self._hold(self.rng.uniform(1.0, 4.0))
            proxy.delay(0)
            self._heal(fault_id)
        finally:
            self.busy_proxies.discard(proxy.name)

    async def proxy_partition(self, fault_id: int) -> None:
        """Half-open: nothing forwarded, nothing closed; then resume or drop."""
        proxy = self._pick_proxy()
        resume = self.rng.random() < 0.5
        duration = self.rng.uniform(0.5, 2 * self.settings.lease_ms / 1000)
        try:
            proxy.partition()
            self._fault(
                fault_id,
                "proxy_partition",
                proxy=proxy.name,
                heal="resume" if resume else "drop",
                duration_ms=duration * 1000,
            )
            await self._hold(duration)
            proxy.heal(resume=resume)
            self._heal(fault_id)
        finally:
            self.busy_proxies.discard(proxy.name)

    async def heal_all(self) -> None:
        """After the fault phase: faults still going are cut short, then every proxy
        forwards and every process runs."""
        self.ending.set()
        if self.tasks:
            await asyncio.gather(*self.tasks)
        for proxy in self.cluster.proxies:
            proxy.normal()
        for worker in self.cluster.workers:
            worker.signal(signal.SIGCONT)
            if not worker.running:
                worker.start()
        for coordinator in self.cluster.coordinators:
            if not coordinator.up:
                await coordinator.start()


# -- producers, manager, observer ---------------------------------------------------------


def make_payload(rng: random.Random, key: str) -> Task | Fragile:
    roll = rng.random()
    if roll < 0.7:
        sleep_ms = rng.randint(10, 200)
    elif roll < 0.9:
        sleep_ms = rng.randint(500, 1_500)
    else:
        sleep_ms = rng.randint(1_500, 3_000)
    kind = Fragile if rng.random() < 0.2 else Task
    return kind(
        key=key,
        sleep_ms=sleep_ms,
        fail_executions=1 if rng.random() < 0.2 else 0,
        permanent=rng.random() < 0.04,
    )


DEEP_KEY_SHARE = 0.4
"""The share of the jobs that ``pick_key`` gives the first key: its backlog outgrows a
per-key limit while the other keys' jobs still flow (fair turns)."""


def pick_key(rng: random.Random, keys: int) -> str | None:
    """A job's concurrency key among ``keys`` (``k0`` takes ``DEEP_KEY_SHARE`` of the
    jobs, the rest share the others evenly); None for ``keys`` 0: the implicit key."""
    if keys <= 0:
        return None
    if keys == 1 or rng.random() < DEEP_KEY_SHARE:
        return "k0"
    return f"k{rng.randrange(1, keys)}"


class Producer(threading.Thread):
    """A blocking ``Client`` enqueueing batches with idempotency keys through a proxy,
    retrying a batch on UNAVAILABLE (and deadline) until it is acknowledged. Now and then
    it sends an acknowledged batch again, or sends a new batch through two proxies at
    once (a race on the keys, perhaps across replicas): every answer must name the same
    jobs."""

    def __init__(
        self,
        index: int,
        targets: list[str],
        seed: int,
        recorder: Recorder,
        stop: threading.Event,
        backlog: Callable[[], int] = lambda: 0,
        keys: int = 0,
    ) -> None:
        super().__init__(name=f"chaos-producer-{index}", daemon=True)
        self.keys = keys
        self.backlog = backlog
        self.index = index
        self.targets = targets
        self.rng = random.Random(seed)
        self.recorder = recorder
        self.stop_event = stop
        self.give_up = threading.Event()
        self.errors: list[str] = []
        self.sent: list[list[EnqueueItem]] = []

    def run(self) -> None:
        clients = [Client(target, rpc_timeout=timedelta(seconds=3)) for target in self.targets]
        for client in clients:
            client.job_defaults(retry_delay=RETRY_DELAY, unstarted_recovery_delay=UNSTARTED_DELAY)
        batch = 0
        try:
            while not self.stop_event.is_set():
                if self.backlog() > BACKLOG_CAP:
                    self.stop_event.wait(0.2)
                    continue
                if self.sent and self.rng.random() < 0.1:
                    if not self._enqueue(clients[0], self.rng.choice(self.sent), "again"):
                        return
                    continue
                batch += 1
                items = [
                    EnqueueItem(
                        make_payload(self.rng, key),
                        idempotency_key=key,
                        concurrency_key=pick_key(self.rng, self.keys),
                    )
                    for key in (f"p{self.index}-b{batch}-j{j}" for j in range(self.rng.randint(1, 6)))
                ]
                if len(clients) > 1 and self.rng.random() < 0.15:
                    racer = threading.Thread(target=self._enqueue, args=(clients[1], items, "race"))
                    racer.start()
                    acked = self._enqueue(clients[0], items, "race")
                    racer.join()
                else:
                    acked = self._enqueue(clients[0], items, "new")
                if not acked:
                    return
                self.stop_event.wait(self.rng.uniform(0.3, 1.0))
        except Exception as error:  # reported by the test
            self.errors.append(f"{type(error).__name__}: {error}")
        finally:
            for client in clients:
                client.close()

    def _enqueue(self, client: Client, items: list[EnqueueItem], how: str) -> bool:
        keys = [item.idempotency_key for item in items]
        concurrency_keys = [item.concurrency_key or "" for item in items]
        tries = 0
        while True:
            tries += 1
            try:
                ids = client.enqueue_many(items)
            except CoordinatorUnavailable as error:
                self.recorder.record("enqueue_retry", producer=self.index, keys=keys, error=str(error)[:200])
                if self.give_up.is_set():
                    self.recorder.record("enqueue_unacked", producer=self.index, keys=keys)
                    return False
                time.sleep(0.2)
                continue
            except CoordinatorError as error:
                if error.status_code is not grpc.StatusCode.CANCELLED:
                    self.errors.append(f"enqueue ({how}): {type(error).__name__}: {error}")
                    return False
                # A known finding (tests/chaos/test_findings.py): a call racing a graceful
                # shutdown is answered CANCELLED, not UNAVAILABLE. Counted, and retried.
                self.recorder.record("enqueue_cancelled", producer=self.index, keys=keys, error=str(error))
                time.sleep(0.2)
                continue
            except Exception as error:  # reported by the test (the racing thread's too)
                self.errors.append(f"enqueue ({how}): {type(error).__name__}: {error}")
                return False
            self.recorder.record(
                "enqueue",
                producer=self.index,
                keys=keys,
                ids=ids,
                concurrency_keys=concurrency_keys,
                tries=tries,
                how=how,
            )
            if how == "new":
                self.sent.append(items)
            return True


class Observer:
    """Polls the leased jobs (running, reserved) straight from a coordinator: the
    checker compares each lapsed attempt's recovery with the lease last seen."""

    def __init__(self, cluster: Cluster, recorder: Recorder, interval_s: float) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self.interval_s = interval_s
        self.clients: dict[str, AsyncClient] = {}
        self.backlog = 0
        """Jobs waiting to be claimed (available or scheduled), counted up to just over
        ``BACKLOG_CAP``: the producers hold back above it, so a long run cannot pile up
        more work than the quiet period can finish."""

    async def run(self, stop: asyncio.Event) -> None:
        polls = 0
        while not stop.is_set():
            client = await self.poll_once()
            polls += 1
            if client is not None and polls % 4 == 0:
                with contextlib.suppress(*TRANSIENT):
                    self.backlog = await self._count_waiting(client)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    @staticmethod
    async def _count_waiting(client: AsyncClient) -> int:
        count = 0
        for state in (JobState.AVAILABLE, JobState.SCHEDULED):
            async for _ in client.list_jobs(state=state, page_size=BACKLOG_CAP + 1):
                count += 1
                if count > BACKLOG_CAP:
                    return count
        return count

    async def poll_once(self) -> AsyncClient | None:
        """One read of the leased jobs; returns the client that answered, if any."""
        for replica in self.cluster.coordinators:
            target = replica.target
            if target is None:
                continue
            client = self.clients.get(target)
            if client is None:
                client = self.clients[target] = AsyncClient(target, rpc_timeout=timedelta(seconds=2))
            sent = time.time() * 1000
            try:
                held = []
                for state in (JobState.RUNNING, JobState.RESERVED):
                    async for job in client.list_jobs(state=state, page_size=500):
                        held.append(
                            [job.id, job.current_attempt_id, job.state.value, ms(job.lease_expires_at)]
                        )
            except TRANSIENT as error:
                if not transient(error):
                    raise
                continue
            self.recorder.record("poll", replica=replica.name, held=held, wall=sent)
            return client
        return None

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()


class Manager:
    """Cancels a random job now and then, and retries a failed or cancelled one by hand
    (each at most once, so the run still ends)."""

    def __init__(self, cluster: Cluster, recorder: Recorder, rng: random.Random) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self.rng = rng
        self.retried: set[str] = set()

    def _acknowledged(self) -> list[str]:
        return [job_id for e in self.recorder.events if e["kind"] == "enqueue" for job_id in e["ids"]]

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(1.0, 2.5))
            targets = self.cluster.targets()
            if stop.is_set() or not targets:
                continue
            async with AsyncClient(self.rng.choice(targets), rpc_timeout=timedelta(seconds=3)) as client:
                try:
                    if self.rng.random() < 0.5:
                        await self._cancel(client)
                    else:
                        await self._retry(client)
                except TRANSIENT as error:
                    if not transient(error):
                        raise

    async def _cancel(self, client: AsyncClient) -> None:
        acknowledged = self._acknowledged()
        if not acknowledged:
            return
        job_id = self.rng.choice(acknowledged[-40:])
        try:
            info = await client.cancel(job_id)
            self.recorder.record(
                "cancel", job=job_id, ok=True, state=info.state.value, generation=info.generation
            )
        except FailedPrecondition:
            self.recorder.record("cancel", job=job_id, ok=False)

    async def _retry(self, client: AsyncClient) -> None:
        candidates = []
        for state in (JobState.FAILED, JobState.CANCELLED):
            async for job in client.list_jobs(state=state, page_size=100):
                if job.id not in self.retried:
                    candidates.append(job.id)
        if not candidates:
            return
        job_id = self.rng.choice(candidates)
        self.retried.add(job_id)
        try:
            info = await client.retry(job_id)
            self.recorder.record("retry", job=job_id, ok=True, generation=info.generation)
        except FailedPrecondition:
            self.recorder.record("retry", job=job_id, ok=False)


# -- the end: quiet period and read-back --------------------------------------------------


def job_record(info: JobInfo) -> dict[str, Any]:
    s = info.settings
    return {
        "id": info.id,
        "wire_name": info.wire_name,
        "state": info.state.value,
        "generation": info.generation,
        "executions": info.executions,
        "max_executions": s.max_executions,
        "retry_initial_ms": s.retry_initial_delay // timedelta(milliseconds=1),
        "retry_max_ms": s.retry_max_delay // timedelta(milliseconds=1),
        "unstarted_initial_ms": s.unstarted_initial_delay // timedelta(milliseconds=1),
        "unstarted_max_ms": s.unstarted_max_delay // timedelta(milliseconds=1),
        "max_unstarted": s.max_unstarted_abandonments,
        "idempotency_key": info.idempotency_key,
        "concurrency_key": info.concurrency_key,
        "output": None if info.output is None else info.output.decode(errors="replace"),
        "finished_at": ms(info.finished_at),
        "last_error_code": info.last_error_code,
        "cancel_requested": info.cancel_requested,
        "unstarted_abandonments": info.unstarted_abandonments,
    }


def attempt_record(attempt: AttemptInfo) -> dict[str, Any]:
    return {
        "id": attempt.id,
        "job": attempt.job_id,
        "generation": attempt.generation,
        "worker_id": attempt.worker_id,
        "execution": attempt.execution_number,
        "claimed_at": ms(attempt.claimed_at),
        "started_at": ms(attempt.started_at),
        "finished_at": ms(attempt.finished_at),
        "outcome": None if attempt.outcome is None else attempt.outcome.value,
        "error_code": attempt.error_code,
        "retry_delay_ms": None
        if attempt.retry_delay is None
        else attempt.retry_delay // timedelta(milliseconds=1),
    }


async def _retrying(call: Callable[[], Any], attempts: int = 20) -> Any:
    for attempt in range(attempts):
        try:
            return await call()
        except TRANSIENT as error:
            if not transient(error):
                raise
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.25)
    raise AssertionError("unreachable")


async def wait_quiet(client: AsyncClient, timeout_s: float) -> int:
    """Waits until no job on the coordinator is unended; returns how many still are.

    Every job is read once per pass, whatever its state: a pass of one listing per state
    misses a job that moves to a state already listed (a lease expiring after the
    scheduled jobs were listed and before the running ones), and ended is for good once
    producers and the manager have stopped."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        pending = 0
        try:
            async for job in client.list_jobs(page_size=500):
                pending += job.state in NOT_ENDED
        except TRANSIENT as error:
            if not transient(error):
                raise
            pending = -1
        if pending == 0 or loop.time() > deadline:
            return pending
        await asyncio.sleep(0.5)


async def wait_unleased(client: AsyncClient, timeout_s: float) -> None:
    """Waits (bounded) until no job is reserved or running: with the workers gone, their
    leases lapse and the coordinator recovers them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        try:
            leased = [
                job.id
                for state in (JobState.RESERVED, JobState.RUNNING)
                async for job in client.list_jobs(state=state, page_size=500)
            ]
        except TRANSIENT as error:
            if not transient(error):
                raise
            leased = ["?"]
        if not leased:
            return
        await asyncio.sleep(0.5)


async def read_back(client: AsyncClient, recorder: Recorder) -> int:
    """Records every job on the coordinator and its attempts (``final_*`` events)."""
    jobs = await _retrying(lambda: _all_job_ids(client))
    limit = asyncio.Semaphore(8)

    async def one(job_id: str) -> None:
        async with limit:
            info = await _retrying(lambda: client.get(job_id))
            attempts = await _retrying(lambda: client.attempts(job_id))
        recorder.record("final_job", job=job_record(info))
        for attempt in attempts:
            recorder.record("final_attempt", attempt=attempt_record(attempt))

    await asyncio.gather(*(one(job_id) for job_id in jobs))
    return len(jobs)


async def set_queue_controls(cluster: Cluster, recorder: Recorder, settings: Settings) -> None:
    """Sets the workload's queue rate and running limits as soon as a first enqueue made
    the queue, and records each (before any fault: the nemesis starts after). Jobs
    claimed before then are held to nothing; the checker counts them as holders."""
    controls: list[tuple[str, Callable[[AsyncClient], Any], dict[str, Any]]] = []
    if settings.queue_rate is not None:
        count, period_ms = settings.queue_rate
        controls.append(
            (
                "queue_rate",
                lambda c: c.set_queue_rate(DEFAULT_QUEUE, count, period_ms / 1000),
                {"count": count, "period_ms": period_ms},
            )
        )
    if settings.key_limit is not None:
        key_limit = settings.key_limit
        controls.append(
            (
                "queue_key_limit",
                lambda c: c.set_queue_key_limit(DEFAULT_QUEUE, key_limit),
                {"limit": key_limit},
            )
        )
    if settings.queue_limit is not None:
        queue_limit = settings.queue_limit
        controls.append(
            (
                "queue_limit",
                lambda c: c.set_queue_limit(DEFAULT_QUEUE, queue_limit),
                {"limit": queue_limit},
            )
        )
    if not controls:
        return
    async with AsyncClient(cluster.targets()[0], rpc_timeout=timedelta(seconds=10)) as client:
        for kind, apply, fields in controls:
            await _once_the_queue_exists(functools.partial(apply, client))
            recorder.record(kind, **fields)


async def _once_the_queue_exists(call: Callable[[], Any]) -> None:
    for _ in range(300):
        try:
            await call()
        except RunwickError as error:
            if error.reason != "QUEUE_NOT_FOUND":
                raise
            await asyncio.sleep(0.05)  # no enqueue committed yet
        else:
            return
    raise AssertionError("the workload's queue never appeared: its controls were not set")


async def _all_job_ids(client: AsyncClient) -> list[str]:
    return [job.id async for job in client.list_jobs(page_size=500)]


# -- the run ------------------------------------------------------------------------------


@dataclass
class RunResult:
    history: History
    history_path: Path
    problems: list[str]
    """Harness trouble (not invariant violations): a producer or fault that broke."""
    seconds: float


async def run_chaos(settings: Settings) -> RunResult:
    """Runs the workload and returns its merged history (saved as ``history.jsonl`` in
    the work directory)."""
    began = time.monotonic()
    workdir = settings.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(workdir / "history-live.jsonl")
    rng = random.Random(settings.seed)
    cluster = Cluster(settings, recorder)
    problems: list[str] = []
    stop_producers = threading.Event()
    producers: list[Producer] = []
    stop_manager = asyncio.Event()
    stop_observer = asyncio.Event()
    observer = Observer(cluster, recorder, settings.poll_interval_s)
    quiet_timeout_s = settings.quiet_timeout_s + 0.02 * settings.fault_seconds
    try:
        await cluster.start()
        recorder.record("phase", phase="faults")
        nemesis = Nemesis(cluster, random.Random(rng.random()), recorder)
        manager = Manager(cluster, recorder, random.Random(rng.random()))
        producers = [
            Producer(
                i,
                [p.target for p in cluster.proxies[i:] + cluster.proxies[:i]],
                rng.randrange(2**32),
                recorder,
                stop_producers,
                backlog=lambda: observer.backlog,
                keys=settings.concurrency_keys,
            )
            for i in range(settings.producers)
        ]
        for producer in producers:
            producer.start()
        observing = asyncio.create_task(observer.run(stop_observer))
        managing = asyncio.create_task(manager.run(stop_manager))
        await set_queue_controls(cluster, recorder, settings)
        await nemesis.run(settings.fault_seconds)
        await nemesis.heal_all()
        recorder.record("phase", phase="quiet")
        stop_producers.set()
        for producer in producers:
            await asyncio.to_thread(producer.join, 30)
            if producer.is_alive():
                producer.give_up.set()
                await asyncio.to_thread(producer.join, 10)
        stop_manager.set()
        await managing
        target = cluster.targets()[0]
        async with AsyncClient(target, rpc_timeout=timedelta(seconds=10)) as client:
            pending = await wait_quiet(client, quiet_timeout_s)
            if pending:
                problems.append(
                    f"{pending} job(s) still not ended {quiet_timeout_s:g} s into the quiet period"
                )
                # Read a still picture: no worker may change what the read-back sees.
                await cluster.stop_workers()
                await wait_unleased(client, settings.lease_ms / 1000 * 2 + 10)
            stop_observer.set()
            await observing
            recorder.record("phase", phase="read_back")
            await read_back(client, recorder)
        problems.extend(nemesis.errors)
        for producer in producers:
            problems.extend(f"producer {producer.index}: {error}" for error in producer.errors)
        await cluster.stop()
    finally:
        stop_producers.set()
        for producer in producers:
            producer.give_up.set()
        stop_manager.set()
        stop_observer.set()
        await observer.close()
        cluster.reap()
        for proxy in cluster.proxies:
            await proxy.close()
        recorder.close()
    header = {**settings.header(), "problems": problems, "log_errors": scan_logs(workdir)}
    history = merge(header, recorder.events, sorted(workdir.glob("events-*.jsonl")))
    path = history.save(workdir / "history.jsonl")
    return RunResult(history, path, problems, time.monotonic() - began)


_LEVEL = re.compile(r" (ERROR|CRITICAL) (\S+) (.*)")
_NOISE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d+")


def scan_logs(workdir: Path) -> dict[str, int]:
    """ERROR and CRITICAL lines of every process log, by logger and message with IDs
    and numbers blanked: not invariant violations, but worth a look."""
    found: Counter[str] = Counter()
    for log in workdir.glob("*.log"):
        for line in read_log(log).splitlines():
            match = _LEVEL.search(line)
            if match:
                found[f"{match[2]}: {_NOISE.sub('N', match[3])[:160]}"] += 1
    return dict(found.most_common())


def logs_tail(workdir: Path, chars: int = 1500) -> str:
    """The end of every process log of a run, for a failure message."""
    parts = []
    for log in sorted(workdir.glob("*.log")):
        parts.append(f"--- {log.name} ---\n{read_log(log)[-chars:]}")
    return "\n".join(parts)
