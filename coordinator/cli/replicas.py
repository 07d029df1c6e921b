"""``runwick serve --processes N``: several coordinator processes on one PostgreSQL
database, sharing one API port, so that a coordinator host uses more than one core.

A coordinator process runs its Python under one interpreter lock: under load it uses
about one core however many the machine has (docs/scaling.md). On PostgreSQL any
number of coordinators may serve one database, each a whole replica (its own streams,
dispatcher, writer connections and maintenance; LISTEN/NOTIFY carries new work between
them). So ``serve --processes N`` runs N of them: this process, the first, which also
serves the health port and the dashboard and makes the bootstrap token; and N - 1
replicas it starts (``multiprocessing``'s spawn: a fork would copy gRPC's threads) and
watches. All listen on the same API port with ``SO_REUSEPORT``, and the kernel hands
each new connection to one of them. Each replica serves ``/metrics`` on the next port
(metrics port + 1, + 2, ...), since its counters are its own.

A replica that exits unexpectedly (a crash, ``kill -9``) is started again after a
second; its workers reconnect meanwhile, to a process still listening, and resend what
was not acknowledged, as after any replica's loss. When this process ends, even by
``kill -9``, every replica sees its parent gone and shuts down gracefully.

SQLite has one writer, and its coordinator stays one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.config import ConfigError

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig

log = logging.getLogger("runwick")

AUTO = "auto"
MAX_PROCESSES = 64
START_TIMEOUT_S = 120.0
"""How long a replica may take to import, open the database and listen."""
RESTART_DELAY_S = 1.0
STOP_MARGIN_S = 10.0
"""Beyond the drain timeout, how long a replica gets to end before it is killed."""
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def parse_processes(text: str) -> int | None:
    """``--processes``: a count from 1 to 64, or ``auto`` (None: one per usable core
    on PostgreSQL, one on SQLite)."""
    if text.strip().lower() == AUTO:
        return None
    try:
        count = int(text)
    except ValueError:
        raise ValueError(
            f"--processes must be a whole number from 1 to {MAX_PROCESSES} or 'auto', got {text!r}"
        ) from None
    if not 1 <= count <= MAX_PROCESSES:
        raise ValueError(f"--processes must be from 1 to {MAX_PROCESSES} or 'auto', got {count}")
    return count


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity, lowered to its cgroup's CPU
    quota when one is set (a Kubernetes CPU limit; ``os.cpu_count`` would report the
    node's cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    return max(cores, 1)


def process_count(requested: int | None, database_url: str, cores: int) -> int:
    """How many coordinator processes ``serve`` runs on ``database_url``. Raises
    ConfigError for more than one on SQLite."""
    from sqlalchemy.engine import make_url

    try:
        postgres = make_url(database_url).get_backend_name() == "postgresql"
    except Exception:  # a malformed URL: the store's own opening says what is wrong
        postgres = False
    if requested is None:
        return cores if postgres else 1
    if requested > 1 and not postgres:
        raise ConfigError(
            f"--processes {requested} needs PostgreSQL: SQLite has a single writer, so its "
            "coordinator is one process (use --processes 1, or a postgresql:// database URL)"
        )
    return requested


def replica_config(config: CoordinatorConfig, index: int, port: int) -> CoordinatorConfig:
    """The configuration of replica ``index`` (1, 2, ...): the first process's, on the
    port it bound, without the ports and the token only the first one serves or makes;
    ``/metrics`` on the first's metrics port + ``index`` (any free port when that is 0)."""
    metrics_port = config.metrics_port
    if metrics_port:
        metrics_port += index
    return dataclasses.replace(
        config,
        port=port,
        share_port=True,
        health_port=None,
        scaler_port=None,
        dashboard_port=None,
        metrics_port=metrics_port,
        bootstrap_token=None,
        generate_bootstrap_token=False,
        admin_token_file=None,
    )


@dataclasses.dataclass
class _Replica:
    index: int
    process: BaseProcess
    metrics_port: int | None = None


class ReplicaSet:
    """The replicas this process starts and watches (see the module's docstring)."""

    def __init__(
        self, config: CoordinatorConfig, port: int, count: int, log_level: str, log_format: str
    ) -> None:
        self._configs = [replica_config(config, index, port) for index in range(1, count + 1)]
        self._logging = (log_level, log_format)
        self._stop_wait_s = config.drain_timeout_s + STOP_MARGIN_S
        self._context = multiprocessing.get_context("spawn")
        self.replicas: list[_Replica] = []
        self._stopping = False
        self._watcher: asyncio.Task[None] | None = None

    @property
    def metrics_ports(self) -> list[int | None]:
        return [replica.metrics_port for replica in self.replicas]

    async def start(self) -> None:
        """Starts every replica and waits until each listens. Raises OSError or
        ConfigError, with what the replica said, when one cannot start (the others are
        stopped)."""
        try:
            for index in range(1, len(self._configs) + 1):
                self.replicas.append(await self._start_one(index))
        except BaseException:
            await self.stop()
            raise
        self._watcher = asyncio.create_task(self._watch(), name="runwick-replicas")

    async def _start_one(self, index: int) -> _Replica:
        ours, theirs = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=run_replica,
            args=(self._configs[index - 1], *self._logging, theirs),
            name=f"runwick-replica-{index}",
            daemon=False,
        )
        process.start()
        theirs.close()
        try:
            said = await asyncio.to_thread(_first_word, ours, START_TIMEOUT_S)
            if said is None or said[0] != "ready":
                why = said[1] if said is not None else f"no answer within {START_TIMEOUT_S:.0f} s"
                raise OSError(f"replica {index} of the coordinator did not start: {why}")
        except BaseException:
            # Failed, or cancelled while starting (a stop meanwhile): not left running unlisted.
            process.kill()
            await asyncio.to_thread(process.join, 5)
            raise
        finally:
            ours.close()
        log.info("replica %d listening (pid %d)", index, process.pid)
        metrics_port = said[1]
        return _Replica(index, process, metrics_port if isinstance(metrics_port, int) else None)

    async def _watch(self) -> None:
        """Starts a replica again when it exits while this process is not stopping."""
        loop = asyncio.get_running_loop()
        while not self._stopping:
            ended = loop.create_future()
            for replica in self.replicas:
                loop.add_reader(replica.process.sentinel, _set_once, ended, replica)
            try:
                gone: _Replica = await ended
            finally:
                for replica in self.replicas:
                    loop.remove_reader(replica.process.sentinel)
            gone.process.join()
            if self._stopping:
                return
            log.error(
                "replica %d (pid %s) exited with code %s; starting it again",
                gone.index,
                gone.process.pid,
                gone.process.exitcode,
            )
            await asyncio.sleep(RESTART_DELAY_S)
            if self._stopping:
                return
            try:
                fresh = await self._start_one(gone.index)
            except OSError as exc:
                log.error("%s; trying again", exc)
                continue  # ``gone`` stays listed: its sentinel is ready, so the next round retries
            self.replicas[self.replicas.index(gone)] = fresh

    async def stop(self) -> None:
        """Asks every replica to shut down gracefully (SIGTERM: they drain their workers)
        and waits for them; one still running after the drain timeout and a margin is
        killed."""
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for replica in self.replicas:
            if replica.process.is_alive():
                replica.process.terminate()  # SIGTERM
        await asyncio.gather(*(asyncio.to_thread(self._reap, replica) for replica in self.replicas))

    def _reap(self, replica: _Replica) -> None:
        replica.process.join(self._stop_wait_s)
        if replica.process.is_alive():
            pid = replica.process.pid
            log.error("replica %d (pid %s) did not stop in time; killing it", replica.index, pid)
            replica.process.kill()
            replica.process.join()


def _set_once(future: asyncio.Future[_Replica], replica: _Replica) -> None:
    if not future.done():
        future.set_result(replica)


def _first_word(connection: Connection, timeout_s: float) -> tuple[str, object] | None:
    """What a starting replica says first, or None when it said nothing in time or
    died before saying anything."""
    try:
        if connection.poll(timeout_s):
            word = connection.recv()
            if isinstance(word, tuple) and len(word) == 2:
                return word[0], word[1]
    except (EOFError, OSError):
        return None
    return None


# -- inside a replica -------------------------------------------------------------------


def run_replica(config: CoordinatorConfig, log_level: str, log_format: str, parent: Connection) -> None:
    """A replica process's whole life (spawned by ``ReplicaSet``): it says ``ready`` with
    its metrics port, or ``failed`` with why, on ``parent``, then serves until SIGTERM,
    SIGINT or the first process's end."""
    from coordinator.cli.logs import quiet_libraries
    from worker_sdk import configure_logging

    configure_logging(log_level, log_format)
    quiet_libraries()
    try:
        asyncio.run(_serve_replica(config, parent))
    except Exception as exc:
        # Told once: before ``ready`` the first process reports it, after it the log does.
        with contextlib.suppress(OSError):
            parent.send(("failed", f"{type(exc).__name__}: {exc}"))
        log.error("replica failed: %s", exc)
        raise SystemExit(2) from None


async def _serve_replica(config: CoordinatorConfig, parent: Connection) -> None:
    from coordinator.cli.heap import freeze_start_up_heap
    from coordinator.process import start_coordinator

    running = await start_coordinator(config)
    freeze_start_up_heap()
    parent.send(("ready", running.metrics_port))
    parent.close()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    first = multiprocessing.parent_process()
    if first is not None:
        # Readable once the first process has ended, however it ended.
        loop.add_reader(first.sentinel, stop.set)
    await stop.wait()
    await running.stop()
