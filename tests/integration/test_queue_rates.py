"""Queue rates over real worker processes (issue 41): a rate of 10/1 s never lets more
than 10 jobs start in any 1 s window (from the attempts' start records) and still runs
40 jobs; bad rates are refused and change nothing; on PostgreSQL two replicas share one
rate; a coordinator killed with kill -9 in the middle of a window grants no fresh burst
when it starts again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from coordinator.domain.demand import DemandTarget
from coordinator.process import RunningCoordinator
from tests.e2e.cli import runwick
from tests.integration import test_queue_controls
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import CooperativeSleep
from tests.support import WorkerProcess, free_port, kill9, serve, stop, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import ArgumentError, AsyncClient, JobState, RunwickError
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc, queue_pb2

replicas = test_queue_controls.replicas
"""The fixture: two coordinators over one PostgreSQL database."""

pytestmark = pytest.mark.slow


def most_in_any_window(times: list[datetime], period: timedelta) -> int:
    """The most of ``times`` in any half-open window [t, t + period)."""
    ordered = sorted(times)
    return max((sum(1 for u in ordered if t <= u < t + period) for t in ordered), default=0)


async def _starts(client: AsyncClient, job_ids: list[str]) -> list[datetime]:
    starts = []
    for job_id in job_ids:
        job = await client.wait(job_id, timeout=timedelta(seconds=60))
        assert job.state is JobState.SUCCEEDED, job
        for attempt in await client.attempts(job_id):
            assert attempt.started_at is not None
            starts.append(attempt.started_at)
    return starts


async def test_a_rate_of_ten_per_second_holds_in_every_window(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    warm = await client.enqueue(CooperativeSleep(0.0))  # the queue exists from here on
    for _ in range(2):
        spawn_worker(coordinator.target, TEST_CONCURRENCY=8)
    await client.wait(warm, timeout=timedelta(seconds=30))
    shown = await client.set_queue_rate("default", 10, 1)
    assert shown.rate is not None and (shown.rate.count, shown.rate.period) == (10, timedelta(seconds=1))

    job_ids = [await client.enqueue(CooperativeSleep(0.0)) for _ in range(40)]
    starts = await _starts(client, job_ids)

    assert len(starts) == 40
    assert most_in_any_window(starts, timedelta(seconds=1)) <= 10
    [listed] = await client.list_queues()
    assert listed.rate == shown.rate


async def test_bad_rates_are_refused_and_change_nothing(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    await client.enqueue(CooperativeSleep(0.0))
    before = await client.set_queue_rate("default", 5, 2, per_key=True)
    for count, per_seconds in ((0, 1), (-3, 1), (1_000_001, 1)):
        with pytest.raises(RunwickError) as refused:
            await client.set_queue_rate("default", count, per_seconds)
        assert (refused.value.status_code, refused.value.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "OUT_OF_RANGE",
        )
    for per_seconds in (0, -1, 8 * 86_400, "1s"):
        with pytest.raises(ArgumentError):
            await client.set_queue_rate("default", 10, per_seconds)  # type: ignore[arg-type]
    with pytest.raises(RunwickError) as missing:
        await client.set_queue_rate("nowhere", 10, 1)
    assert missing.value.reason == "QUEUE_NOT_FOUND"

    # Periods the SDK would not send, sent as they are: refused by the coordinator.
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        for period in (
            Duration(seconds=0),
            Duration(seconds=8 * 86_400),
            Duration(nanos=500),
            Duration(seconds=-1),
        ):
            request = queue_pb2.SetQueueRateRequest(
                name="default", rate=queue_pb2.QueueRate(count=10, period=period)
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused_period:
                await admin.SetQueueRate(request)
            assert refused_period.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    [after] = await client.list_queues()
    assert after.rate == before.rate
    actions = [event.action async for event in client.list_audit_events()]
    assert actions.count("queue.rate") == 1

    removed = await client.set_queue_rate("default", None)
    assert removed.rate is None


@pytest.mark.postgres
async def test_two_replicas_share_one_rate(
    replicas: tuple[RunningCoordinator, RunningCoordinator], spawn_worker: Callable[..., WorkerProcess]
) -> None:
    first, second = replicas
    async with AsyncClient(first.target) as client:
        warm = await client.enqueue(CooperativeSleep(0.0))
        for target in (first.target, second.target, second.target):
            spawn_worker(target, TEST_CONCURRENCY=8)
        await client.wait(warm, timeout=timedelta(seconds=30))
        await client.set_queue_rate("default", 6, 1)

        job_ids = [await client.enqueue(CooperativeSleep(0.0)) for _ in range(24)]
        starts = await _starts(client, job_ids)

    assert len(starts) == 24
    assert most_in_any_window(starts, timedelta(seconds=1)) <= 6


def _serve(database_url: str, port: int, log: Path) -> object:
    return serve(
        log,
        *("--database-url", database_url, "--port", str(port)),
        *NO_FIXED_PORTS,
        "--insecure",  # loopback only; the test's workers and clients send no token
    )


async def test_a_restart_in_the_middle_of_a_window_grants_no_fresh_burst(
    database_url: str, tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """4 starts per 10 s: the first four run, the coordinator is killed with kill -9 and
    started again well inside their window; the next four wait for it to pass. The
    window is long enough for a kill and a restart on a loaded machine: at 6 s the
    restart sometimes took the whole window, and the test then failed for testing
    nothing."""
    period = timedelta(seconds=10)
    port = free_port()
    target = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    server = _serve(database_url, port, log)
    try:
        await wait_listening(server, log)  # type: ignore[arg-type]
        async with AsyncClient(target) as client:
            warm = await client.enqueue(CooperativeSleep(0.0))
            spawn_worker(target, TEST_CONCURRENCY=8)
            await client.wait(warm, timeout=timedelta(seconds=30))
            await client.set_queue_rate("default", 4, period.total_seconds())
            job_ids = [await client.enqueue(CooperativeSleep(0.0)) for _ in range(8)]
            first_four = await _succeeded(client, job_ids, 4)
        await kill9(server)  # type: ignore[arg-type]
        server = _serve(database_url, port, log)
        await wait_listening(server, log, count=2)  # type: ignore[arg-type]
        restarted_at = datetime.now().astimezone()
        async with AsyncClient(target) as client:
            starts = await _starts(client, job_ids)
    finally:
        await stop(server)  # type: ignore[arg-type]

    assert restarted_at < min(first_four) + period, "the restart took a whole window: nothing was tested"
    assert len(starts) == 8
    assert most_in_any_window(starts, period) <= 4


async def _succeeded(client: AsyncClient, job_ids: list[str], count: int) -> list[datetime]:
    """The start times of the first ``count`` of ``job_ids`` to succeed, once they have."""
    while True:
        done = []
        for job_id in job_ids:
            if (await client.get(job_id)).state is JobState.SUCCEEDED:
                done += [a.started_at for a in await client.attempts(job_id) if a.started_at is not None]
        if len(done) >= count:
            return done
        await asyncio.sleep(0.05)


async def test_jobs_held_back_by_a_rate_say_so_and_autoscalers_do_not_count_them(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    """Reserved jobs count against the rate (each may start any moment): with 2 of a
    2-per-minute rate claimed and unstarted, the other jobs wait on the rate, GetJob and
    ``runwick jobs get`` say so, and the scaler's runnable count leaves them out."""
    app = coordinator.running.app
    job_ids = [await client.enqueue(CooperativeSleep(0.0)) for _ in range(5)]
    assert (await app.slot_demand(DemandTarget("default"), cap=100)).due == 5
    await client.set_queue_rate("default", 2, 60)
    worker = RawWorker(coordinator.target, "raw-rated", ["tests.cooperative_sleep"], capacity=2)
    try:
        claimed = {(await worker.claim()).job_id for _ in range(2)}
        waiting = [job_id for job_id in job_ids if job_id not in claimed]
        assert {(await client.get(job_id)).waiting_reason for job_id in waiting} == {"rate"}
        assert {(await client.get(job_id)).waiting_reason for job_id in claimed} == {None}
        demand = await app.slot_demand(DemandTarget("default"), cap=100)
        assert (demand.leased, demand.due) == (2, 0)
        await app.queue_statistics.run_once()
        held = {"queue": "default", "kind": "rate"}
        assert app.metrics.registry.get_sample_value("runwick_queue_held_back_jobs", held) == 3
        shown = await runwick("jobs", "get", waiting[0], "--target", coordinator.target)
        assert (
            "waiting on" in shown.stdout and "rate" in shown.stdout.split("waiting on", 1)[1].splitlines()[0]
        )

        await client.set_queue_rate("default", None)
        assert (await client.get(waiting[0])).waiting_reason is None
        assert (await app.slot_demand(DemandTarget("default"), cap=100)).due == 3
        await app.queue_statistics.run_once()
        assert app.metrics.registry.get_sample_value("runwick_queue_held_back_jobs", held) is None
    finally:
        await worker.close()
