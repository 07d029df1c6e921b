"""``runwick serve --processes N``: N coordinator processes on one PostgreSQL database,
one API port (``coordinator.cli.replicas``).

Real processes throughout: the first ``serve`` process and the replica it spawns, real
worker processes, gRPC connections that the kernel spreads over the two listeners. What
must hold: both processes answer on the one port; jobs enqueued through connections to
either run exactly once on workers connected to either; a replica killed with
``kill -9`` is started again and serves; SIGTERM ends every process; a first process
killed with ``kill -9`` leaves no replica behind; SQLite refuses more than one process.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import _truncate
from tests.integration.worker_app import Echo
from tests.support import eventually
from tests.support.processes import (
    kill9,
    read_log,
    reap,
    serve,
    start_worker,
    stop,
    wait_exit,
    wait_for_line,
    wait_listening,
)
from worker_sdk import AsyncClient

WORKER_APP = "tests.integration.worker_app:worker"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
"""A channel option: a connection of this channel's own, which the kernel may hand to
either process (channels otherwise share one connection per target)."""
HEALTH_CHECK = "grpc.health.v1.Health/Check"
ENQUEUE = "runwick.v1.JobService/Enqueue"
JOBS = 60


@dataclass
class TwoProcesses:
    process: subprocess.Popen[str]
    log: Path
    target: str
    metrics_ports: list[int]

    def replica_pids(self) -> list[int]:
        """The replica's PIDs, each time the first process (re)started one, in order."""
        return [int(pid) for pid in re.findall(r"replica 1 listening \(pid (\d+)\)", read_log(self.log))]


def _serve_flags(database_url: str) -> list[str]:
    return [
        *("--database-url", database_url, "--port", "0", "--insecure", "--processes", "2"),
        *("--health-port", "-1", "--dashboard-port", "-1", "--metrics-port", "0"),
        *("--drain-timeout", "2", "--maintenance-interval", "0.2"),
    ]


@pytest.fixture
async def two_processes(postgres_url: str, tmp_path: Path) -> AsyncIterator[TwoProcesses]:
    _truncate(postgres_url)
    log = tmp_path / "serve.log"
    process = serve(log, *_serve_flags(postgres_url))
    try:
        target = await wait_listening(process, log, timeout=60)
        ports_line = await wait_for_line(process, log, "metrics ports ")
        ports = [
            int(port) for port in re.findall(r"\d+", ports_line.split("metrics ports ")[1].split(", dash")[0])
        ]
        yield TwoProcesses(process, log, target, ports)
    finally:
        if process.poll() is None:
            await stop(process)
        reap(process)


def _handled(metrics_port: int, method: str) -> float:
    """How many calls of ``method`` the process behind ``metrics_port`` handled."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("runwick_grpc_server_handled_total{") and f'grpc_method="{method}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _check_health_on_new_connection(target: str) -> None:
    async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as channel:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet collected by a parent that is gone too) counts as ended.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.postgres
async def test_both_processes_answer_on_the_one_port(two_processes: TwoProcesses) -> None:
    assert len(two_processes.metrics_ports) == 2
    assert len(two_processes.replica_pids()) == 1
    # New connections until each process has answered one: the kernel picks per connection
    # (at most 64 tries; both missing one process that long is 2**-63 likely).
    for _ in range(64):
        await _check_health_on_new_connection(two_processes.target)
        counts = [
            await asyncio.to_thread(_handled, port, HEALTH_CHECK) for port in two_processes.metrics_ports
        ]
        if all(count > 0 for count in counts):
            break
    assert all(count > 0 for count in counts), f"calls handled per process: {counts}"


@pytest.mark.postgres
async def test_jobs_enqueued_through_either_process_run_exactly_once(
    two_processes: TwoProcesses, tmp_path: Path, postgres_url: str
) -> None:
    workers = [
        start_worker(WORKER_APP, two_processes.target, tmp_path / f"worker-{n}.log", test_concurrency=8)
        for n in range(3)
    ]
    try:
        job_ids: list[str] = []
        for round_number in range(JOBS // 10):
            async with AsyncClient(two_processes.target, options=OWN_CONNECTION) as client:
                job_ids += await client.enqueue_many([Echo(f"{round_number}-{n}") for n in range(10)])
        async with AsyncClient(two_processes.target) as client:
            finished = [await client.wait(job_id) for job_id in job_ids]
            assert {job.state.value for job in finished} == {"succeeded"}
            attempts = [await client.attempts(job_id) for job_id in job_ids]
        assert all(len(runs) == 1 for runs in attempts), "a job ran more than once"
        enqueued = [await asyncio.to_thread(_handled, port, ENQUEUE) for port in two_processes.metrics_ports]
        assert sum(enqueued) == JOBS // 10  # every call counted once, by the process that took it
    finally:
        for worker in workers:
            await worker.terminate()


@pytest.mark.postgres
async def test_a_replica_killed_is_started_again_and_serves(two_processes: TwoProcesses) -> None:
    [replica] = two_processes.replica_pids()
    os.kill(replica, signal.SIGKILL)
    await wait_for_line(
        two_processes.process, two_processes.log, f"replica 1 (pid {replica}) exited with code -9"
    )
    await eventually(lambda: len(two_processes.replica_pids()) == 2 or None, 60, what="a new replica")
    fresh = two_processes.replica_pids()[-1]
    assert fresh != replica and _alive(fresh)
    # The new replica serves on the same port: new connections reach both processes again.
    new_ports = re.findall(r"metrics on http://127.0.0.1:(\d+)/metrics", read_log(two_processes.log))
    replica_port = int(new_ports[-1])
    for _ in range(64):
        await _check_health_on_new_connection(two_processes.target)
        if await asyncio.to_thread(_handled, replica_port, HEALTH_CHECK) > 0:
            break
    assert await asyncio.to_thread(_handled, replica_port, HEALTH_CHECK) > 0


@pytest.mark.postgres
async def test_sigterm_ends_every_process(two_processes: TwoProcesses) -> None:
    [replica] = two_processes.replica_pids()
    assert await stop(two_processes.process) == 0
    assert not _alive(replica)
    assert "exited with code" not in read_log(two_processes.log)  # no restart on the way out


@pytest.mark.postgres
async def test_a_replica_ends_by_itself_when_the_first_process_is_killed(two_processes: TwoProcesses) -> None:
    [replica] = two_processes.replica_pids()
    await kill9(two_processes.process)
    await eventually(lambda: not _alive(replica) or None, 30, what="the replica to end")


async def test_more_than_one_process_on_sqlite_is_refused_before_anything_starts(tmp_path: Path) -> None:
    database = tmp_path / "runwick.db"
    log = tmp_path / "serve.log"
    process = serve(log, *_serve_flags(f"sqlite:///{database}"))
    try:
        assert await wait_exit(process, 60) == 2
    finally:
        reap(process)
    said = read_log(log)
    assert "--processes 2 needs PostgreSQL: SQLite has a single writer" in said
    assert not database.exists()


@pytest.mark.parametrize("count", ["0", "many"])
async def test_a_bad_process_count_is_refused(tmp_path: Path, count: str) -> None:
    log = tmp_path / "serve.log"
    process = serve(log, "--processes", count, "--database-url", f"sqlite:///{tmp_path / 'r.db'}")
    try:
        assert await wait_exit(process, 60) == 2
    finally:
        reap(process)
    assert "argument --processes: --processes must be" in read_log(log)
    assert not (tmp_path / "r.db").exists()


async def test_every_process_freezes_its_start_up_heap_before_it_is_ready(
    postgres_url: str, tmp_path: Path
) -> None:
    _truncate(postgres_url)
    log = tmp_path / "serve.log"
    process = serve(log, *_serve_flags(postgres_url), "--log-level", "debug")
    try:
        await wait_listening(process, log, timeout=60)
    finally:
        assert await stop(process) == 0
    before_ready = read_log(log).split("runwick coordinator listening on ", 1)[0]
    frozen = re.findall(r"start-up heap frozen: (\d+) objects", before_ready)
    assert len(frozen) == 2 and all(int(count) > 10_000 for count in frozen), before_ready[-2000:]
