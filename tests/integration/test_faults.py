"""Crashes and fencing with real processes: kill -9 before start, a stale result after
re-claim, and a coordinator killed with jobs in flight (R-4, R-11, R-14, nothing lost)."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from coordinator.store import Store
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import BlockUntil, CooperativeSleep, Echo
from tests.support import (
    eventually_async,
    free_port,
    health_status,
    kill9,
    reap,
    serve,
    start_process,
    stop,
    wait_exit,
    wait_for_line,
    wait_listening,
)
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import AsyncClient, JobState, Outcome
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

pytestmark = pytest.mark.slow
WAIT = timedelta(seconds=30)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def test_r4_kill_9_before_start_charges_no_execution(
    coordinator: Coordinator, client: AsyncClient, spawn_worker, tmp_path: Path
):
    job_id = await client.enqueue(Echo("after a crash"))
    log = tmp_path / "rawstream.log"
    command = [sys.executable, "-m", "tests.integration.rawstream", coordinator.target, "tests.echo"]
    hanging = start_process(command, log)
    try:
        line = await wait_for_line(hanging, log, "claimed ")
        assert line.startswith(f"claimed {job_id}")
        await kill9(hanging)
    finally:
        reap(hanging)

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


def _serve(database_url: str, port: int, log: Path, *extra: str) -> subprocess.Popen[str]:
    return serve(
        log,
        *("--database-url", database_url, "--port", str(port), "--maintenance-interval", "0.2"),
        # No fixed side ports: a restart on the same port must not collide.
        *NO_FIXED_PORTS,
        "--insecure",  # loopback only; the test's workers and clients send no token
        *extra,
    )


async def test_coordinator_kill_9_with_jobs_in_flight_loses_nothing(
    database_url: str, spawn_worker, tmp_path: Path
):
    port = free_port()
    target = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    server = _serve(database_url, port, log)
    try:
        async with AsyncClient(target) as client:
            await wait_listening(server, log)
            spawn_worker(target, test_lease_ms=2_000, test_heartbeat_ms=300, test_concurrency=4)
            job_ids = [await client.enqueue(CooperativeSleep(0.2)) for _ in range(30)]
            # Kill the coordinator once some jobs are done, with others in flight.
            await client.wait(job_ids[0], WAIT)
            await kill9(server)
            server = _serve(database_url, port, log)
            await wait_listening(server, log, count=2)

            results = [await client.wait(job_id, timedelta(seconds=60)) for job_id in job_ids]
    finally:
        await stop(server)

    assert [r.state for r in results] == [JobState.SUCCEEDED] * len(job_ids), log.read_text()[-3000:]
    assert {r.output for r in results} == {b"slept"}


def _job_state(database_url: str, job_id: str) -> str:
    store = Store(database_url)  # a plain reader: no migration check against a live server
    try:
        job = store.get_job(job_id)
    finally:
        store.close()
    assert job is not None
    return job.state.value


async def test_coordinator_sigterm_flips_readiness_first_then_drains_workers(
    database_url: str, spawn_worker, tmp_path: Path
):
    """SIGTERM: readiness NOT_SERVING at once (liveness stays SERVING), then Drain; a run
    that ends within the drain finishes, one that does not is interrupted and recorded
    (R-12); the process exits within drain + server grace."""
    drain_s = 4.0  # workers are told 2 s (drain_reserve_s keeps 2 s for their results)
    port = free_port()
    target = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    server = _serve(
        database_url, port, log, "--insecure", "--drain-timeout", str(drain_s), "--health-port", "0"
    )
    try:
        await wait_listening(server, log)
        [health_port] = re.findall(r"runwick health port (\d+),", log.read_text())
        health_port_number = int(health_port)
        assert await health_status(health_port_number, "readiness") == SERVING
        spawn_worker(target, test_drain_ms=20_000, test_grace_ms=2_000)
        started = tmp_path / "started"
        async with AsyncClient(target) as client:
            short_id = await client.enqueue(CooperativeSleep(1.0))
            long_id = await client.enqueue(BlockUntil(str(started), str(tmp_path / "never")))

            async def both_running() -> bool:
                states = {(await client.get(job_id)).state for job_id in (short_id, long_id)}
                return states == {JobState.RUNNING}

            await eventually_async(both_running)
        signalled = asyncio.get_running_loop().time()
        server.send_signal(signal.SIGTERM)

        async def not_ready() -> bool:
            return await health_status(health_port_number, "readiness") == NOT_SERVING

        await eventually_async(not_ready, timeout=5)
        # Readiness flipped first: the process still serves liveness and the long run goes on.
        assert server.poll() is None
        assert await health_status(health_port_number, "liveness") == SERVING
        assert await asyncio.to_thread(_job_state, database_url, long_id) == "running"

        exit_code = await wait_exit(server, 60)
        exited_after_s = asyncio.get_running_loop().time() - signalled
    finally:
        reap(server)
    assert exit_code == 0, log.read_text()[-3000:]
    assert "shutting down: draining workers" in log.read_text()
    assert exited_after_s < drain_s + min(drain_s, 5.0) + 3.0, log.read_text()[-3000:]

    store = Store.open(database_url)
    try:
        short = store.get_job(short_id)
        long = store.get_job(long_id)
        [interrupted] = store.list_attempts(long_id)
    finally:
        store.close()
    assert short is not None and long is not None
    assert (short.state.value, short.output) == ("succeeded", b"slept")  # finished within the drain
    assert interrupted.outcome is not None and interrupted.outcome.value == "interrupted"
    assert (long.state.value, long.last_error_code) == ("scheduled", "worker_shutdown")  # retried later
