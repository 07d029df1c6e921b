"""Crashes and fencing with real processes: kill -9 before start, a stale result after
re-claim, and a coordinator killed with jobs in flight (R-4, R-11, R-14, nothing lost)."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from coordinator.store import Store
from tests.integration.conftest import ROOT, Coordinator, eventually, eventually_async
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import CooperativeSleep, Echo
from worker_sdk import AsyncClient, JobState, Outcome
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

pytestmark = pytest.mark.slow
WAIT = timedelta(seconds=30)


async def test_r4_kill_9_before_start_charges_no_execution(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
):
    job_id = await client.enqueue(Echo("after a crash"))
    hanging = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.rawstream", coordinator.target, "tests.echo"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = await asyncio.to_thread(hanging.stdout.readline)  # type: ignore[union-attr]
        assert line.startswith(f"claimed {job_id}")
        hanging.send_signal(signal.SIGKILL)
        await asyncio.to_thread(hanging.wait, 10)
    finally:
        hanging.kill()
        hanging.stdout.close()  # type: ignore[union-attr]

    assert (await client.get(job_id)).state is JobState.RESERVED
    await coordinator.jump(60_001)  # the claim's lease lapses, unstarted
    lapsed = await client.get(job_id)
    assert lapsed.state is JobState.SCHEDULED
    assert lapsed.executions == 0
    assert lapsed.unstarted_abandonments == 1

    await coordinator.jump(1_000)  # R-4's first re-queue delay
    spawn_worker(coordinator.target)
    info = await client.wait(job_id, WAIT)

    assert info.state is JobState.SUCCEEDED
    assert info.executions == 1
    assert info.output == b"after a crash (execution 1)"
    first, second = await client.attempts(job_id)
    assert (first.outcome, first.execution_number) == (Outcome.UNSTARTED_ABANDONED, 0)
    assert (second.outcome, second.execution_number) == (Outcome.SUCCEEDED, 1)


async def test_r11_stale_result_after_reclaim_is_rejected(coordinator: Coordinator, client: AsyncClient):
    job_id = await client.enqueue(Echo("fenced"))
    first = RawWorker(coordinator.target, "worker-a", ["tests.echo"], lease_ms=1_000)
    second = RawWorker(coordinator.target, "worker-b", ["tests.echo"], lease_ms=1_000)
    try:
        old = await first.claim()
        assert (await first.start(old.attempt_id)).granted
        await coordinator.jump(1_001)  # worker-a stalls past its lease
        await coordinator.jump(10_000)  # and the retry delay passes
        new = await second.claim()
        assert new.job_id == job_id and new.attempt_id != old.attempt_id
        assert (await second.start(new.attempt_id)).execution_number == 2

        late = await first.succeed(old.attempt_id, b"late")
        assert late.status == pb.ResultAck.STATUS_STALE
        assert (await client.get(job_id)).state is JobState.RUNNING

        current = await second.succeed(new.attempt_id, b"current")
        assert current.status == pb.ResultAck.STATUS_ACCEPTED
        repeat = await second.succeed(new.attempt_id, b"current")  # a resend
        assert repeat.status == pb.ResultAck.STATUS_ACCEPTED
    finally:
        await first.close()
        await second.close()

    info = await client.get(job_id)
    assert info.state is JobState.SUCCEEDED
    assert info.output == b"current"
    attempts = await client.attempts(job_id)
    assert [a.outcome for a in attempts] == [Outcome.ABANDONED, Outcome.SUCCEEDED]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(database_url: str, port: int, log: Path, *extra: str) -> subprocess.Popen[str]:
    with log.open("a") as log_file:  # the child keeps its own descriptor
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "serve",
                "--database-url",
                database_url,
                "--port",
                str(port),
                "--maintenance-interval",
                "0.2",
            ],
            cwd=ROOT,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
        )


async def test_coordinator_kill_9_with_jobs_in_flight_loses_nothing(
    database_url: str, spawn_worker, tmp_path: Path
):
    port = _free_port()
    target = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    server = _serve(database_url, port, log)
    try:
        async with AsyncClient(target) as client:
            await eventually(lambda: "runwick coordinator listening" in log.read_text(), timeout=30)
            spawn_worker(target, test_lease_ms=2_000, test_heartbeat_ms=300, test_concurrency=4)
            job_ids = [await client.enqueue(CooperativeSleep(0.2)) for _ in range(30)]
            # Kill the coordinator once some jobs are done, with others in flight.
            await client.wait(job_ids[0], WAIT)
            server.send_signal(signal.SIGKILL)
            await asyncio.to_thread(server.wait, 10)
            server = _serve(database_url, port, log)
            await eventually(lambda: log.read_text().count("runwick coordinator listening") >= 2, timeout=30)

            results = [await client.wait(job_id, timedelta(seconds=60)) for job_id in job_ids]
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.to_thread(server.wait, 30)

    assert [r.state for r in results] == [JobState.SUCCEEDED] * len(job_ids), log.read_text()[-3000:]
    assert {r.output for r in results} == {b"slept"}


async def test_coordinator_sigterm_drains_workers_and_lets_running_jobs_finish(
    database_url: str, spawn_worker, tmp_path: Path
):
    port = _free_port()
    target = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    server = _serve(database_url, port, log, "--drain-timeout", "20")
    try:
        await eventually(lambda: "runwick coordinator listening" in log.read_text(), timeout=30)
        spawn_worker(target, test_drain_ms=20_000)
        async with AsyncClient(target) as client:
            job_id = await client.enqueue(CooperativeSleep(1.0))

            async def running() -> bool:
                return (await client.get(job_id)).state is JobState.RUNNING

            await eventually_async(running)
        server.send_signal(signal.SIGTERM)
        exit_code = await asyncio.to_thread(server.wait, 60)
    finally:
        server.kill()
    assert exit_code == 0, log.read_text()[-3000:]
    assert "shutting down: draining workers" in log.read_text()

    store = Store.open(database_url)
    try:
        job = store.get_job(job_id)
    finally:
        store.close()
    assert job is not None
    assert (job.state.value, job.output) == ("succeeded", b"slept")  # finished, not interrupted
