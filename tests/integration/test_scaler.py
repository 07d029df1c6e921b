"""KEDA's external scaler served by a real coordinator (docs/autoscaling.md), driven over
gRPC on both engines through scale from zero, busy and idle; and two PostgreSQL
coordinators sharing one database give the same exact numbers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from coordinator.config import CoordinatorConfig, ScalerLimits
from coordinator.process import RunningCoordinator, start_coordinator
from tests.conftest import _truncate
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo, Permanent
from worker_sdk import AsyncClient
from worker_sdk.proto.keda import externalscaler_pb2 as pb
from worker_sdk.proto.keda import externalscaler_pb2_grpc as pb_grpc

QUEUE = "work"
WAKE_ONLY = ScalerLimits(stream_recheck_interval_s=3600)
"""Streams read again only when an enqueue wakes them: a push proves the wake-up path."""


class Scaler:
    """A KEDA-like client of one coordinator's scaler port."""

    def __init__(self, running: RunningCoordinator) -> None:
        assert running.scaler_port is not None
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.scaler_port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    @staticmethod
    def ref(**metadata: str) -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(
            name="workers", namespace="jobs", scalerMetadata={"queue": QUEUE, **metadata}
        )

    async def active(self, **metadata: str) -> bool:
        return bool((await self.stub.IsActive(self.ref(**metadata))).result)

    async def slots(self, **metadata: str) -> int:
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref(**metadata), metricName="s0-runwick-slots")
        (value,) = (await self.stub.GetMetrics(request)).metricValues
        assert value.metricName == "s0-runwick-slots"
        assert value.metricValueFloat == value.metricValue
        return int(value.metricValue)

    async def close(self) -> None:
        await self.channel.close(None)


async def started(database_url: str, **config: Any) -> RunningCoordinator:
    return await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, scaler_port=0, drain_timeout_s=1, **config)
    )


@pytest.fixture
async def running(database_url: str) -> AsyncIterator[RunningCoordinator]:
    coordinator = await started(database_url, scaler=WAKE_ONLY)
    yield coordinator
    await coordinator.stop(grace_s=1)


@pytest.fixture
async def scaler(running: RunningCoordinator) -> AsyncIterator[Scaler]:
    opened = Scaler(running)
    yield opened
    await opened.close()


@pytest.fixture
async def client(running: RunningCoordinator) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(running.target) as opened:
        yield opened


async def test_scale_from_zero_an_enqueue_pushes_active_within_two_seconds(
    scaler: Scaler, client: AsyncClient
) -> None:
    assert not await scaler.active()
    assert await scaler.slots() == 0
    stream = scaler.stub.StreamIsActive(scaler.ref())
    try:
        first = await asyncio.wait_for(stream.read(), 10)
        assert first.result is False
        await client.enqueue(Echo("wake up"), queue=QUEUE)
        # The stream re-reads only when woken (WAKE_ONLY): the enqueue itself wakes it.
        pushed = await asyncio.wait_for(stream.read(), 2.0)
    finally:
        stream.cancel()
    assert pushed.result is True
    assert await scaler.active()
    assert await scaler.slots() == 1


async def test_busy_running_jobs_count_and_keep_the_number_up_while_paused(
    running: RunningCoordinator, scaler: Scaler, client: AsyncClient
) -> None:
    for n in range(3):
        await client.enqueue(Echo(f"job {n}"), queue=QUEUE)
    await client.enqueue(Echo("elsewhere"), queue="other")
    worker = RawWorker(running.target, "busy-worker", ["tests.echo"], queues=[QUEUE])
    try:
        assignment = await worker.claim()
        assert (await worker.start(assignment.attempt_id)).granted
        assert await scaler.slots() == 3  # one running, two available
        await client.pause_queue(QUEUE)
        # Paused: the available jobs wait, but the running one's worker holds its lease.
        assert await scaler.slots() == 1
        assert await scaler.active()
        await worker.succeed(assignment.attempt_id)
        assert await scaler.slots() == 0
        assert not await scaler.active()
        await client.resume_queue(QUEUE)
        assert await scaler.slots() == 2
    finally:
        await worker.close()


async def test_work_a_per_key_limit_or_rate_holds_back_is_left_out_and_leased_work_still_counts(
    running: RunningCoordinator, scaler: Scaler, client: AsyncClient
) -> None:
    """Keys a (3 jobs) and b (2) under a per-key limit of 1: one of each is runnable; once
    a worker holds one of each, the queue wants those 2 slots, not 2 + the 3 held back,
    and the held-back gauge says why. A per-key rate that counts the 2 reserved jobs
    holds the same 3 back."""
    for key, count in (("a", 3), ("b", 2)):
        for n in range(count):
            await client.enqueue(Echo(f"{key}{n}"), queue=QUEUE, concurrency_key=key)
    assert await scaler.slots() == 5
    await client.set_queue_key_limit(QUEUE, 1)
    assert await scaler.slots() == 2
    worker = RawWorker(running.target, "keyed-worker", ["tests.echo"], queues=[QUEUE], capacity=2)
    app = running.app
    held = {"queue": QUEUE, "kind": "key_limit"}
    try:
        claimed = [await worker.claim() for _ in range(2)]
        assert (await worker.start(claimed[0].attempt_id)).granted  # one running, one reserved
        assert await scaler.slots() == 2
        assert await scaler.active()
        await app.queue_statistics.run_once()
        assert app.metrics.registry.get_sample_value("runwick_queue_held_back_jobs", held) == 3
        assert app.metrics.registry.get_sample_value("runwick_queue_desired_slots", {"queue": QUEUE}) == 2

        await client.set_queue_key_limit(QUEUE, None)
        # The reserved job fills its key's window; the started one's key has an empty one
        # (it started before the rate was set): 1 of its jobs is runnable, the other 2 wait.
        await client.set_queue_rate(QUEUE, 1, 3600, per_key=True)
        assert await scaler.slots() == 3
        await app.queue_statistics.run_once()
        rated = {"queue": QUEUE, "kind": "rate"}
        assert app.metrics.registry.get_sample_value("runwick_queue_held_back_jobs", rated) == 2
        assert app.metrics.registry.get_sample_value("runwick_queue_held_back_jobs", held) is None
    finally:
        await worker.close()


async def test_idle_is_zero_and_inactive_once_every_job_has_ended(
    running: RunningCoordinator, scaler: Scaler, client: AsyncClient
) -> None:
    job_id = await client.enqueue(Echo("only"), queue=QUEUE)
    worker = RawWorker(running.target, "idle-worker", ["tests.echo"], queues=[QUEUE])
    try:
        assignment = await worker.claim()
        assert assignment.job_id == job_id
        assert await scaler.slots() == 1  # reserved: claimed, not started yet
        await worker.start(assignment.attempt_id)
        await worker.succeed(assignment.attempt_id)
    finally:
        await worker.close()
    assert await scaler.slots() == 0
    assert not await scaler.active()


async def test_the_horizon_counts_scheduled_jobs_due_within_it_and_wire_names_filter(
    scaler: Scaler, client: AsyncClient
) -> None:
    in_ten_minutes = datetime.now(UTC) + timedelta(minutes=10)
    await client.enqueue(Echo("later"), queue=QUEUE, run_at=in_ten_minutes)
    await client.enqueue(Echo("now"), queue=QUEUE)
    await client.enqueue(Permanent("order-1"), queue=QUEUE)
    assert await scaler.slots() == 2
    assert await scaler.slots(horizonSeconds="300") == 2
    assert await scaler.slots(horizonSeconds="900") == 3
    assert await scaler.slots(wireNames="tests.echo") == 1
    assert await scaler.slots(wireNames="tests.echo", horizonSeconds="900") == 2
    assert not await scaler.active(wireNames="tests.nobody")


async def test_the_metric_spec_is_the_slots_one_replica_runs(scaler: Scaler) -> None:
    spec = await scaler.stub.GetMetricSpec(scaler.ref(slotsPerReplica="4"))
    (metric,) = spec.metricSpecs
    assert (metric.metricName, metric.targetSize, metric.targetSizeFloat) == ("runwick-slots", 4, 4.0)
    (default,) = (await scaler.stub.GetMetricSpec(scaler.ref())).metricSpecs
    assert default.targetSize == 1


@pytest.mark.postgres
async def test_two_coordinators_on_one_database_give_the_same_exact_numbers(postgres_url: str) -> None:
    _truncate(postgres_url)
    first = await started(postgres_url, scaler=WAKE_ONLY)
    second = await started(postgres_url, scaler=WAKE_ONLY)
    scalers = [Scaler(first), Scaler(second)]
    worker = RawWorker(second.target, "worker-on-second", ["tests.echo"], queues=[QUEUE])
    stream = scalers[0].stub.StreamIsActive(Scaler.ref())
    try:
        assert (await asyncio.wait_for(stream.read(), 10)).result is False
        async with AsyncClient(second.target) as client:
            for n in range(5):
                await client.enqueue(Echo(f"job {n}"), queue=QUEUE)
            # An enqueue on the second wakes the first's stream (PostgreSQL notifications).
            assert (await asyncio.wait_for(stream.read(), 10)).result is True
            assignment = await worker.claim()
            await worker.start(assignment.attempt_id)
            assert [await s.slots() for s in scalers] == [5, 5]
            await client.pause_queue(QUEUE)
            assert [await s.slots() for s in scalers] == [1, 1]
            await worker.succeed(assignment.attempt_id)
            assert [await s.slots() for s in scalers] == [0, 0]
    finally:
        stream.cancel()
        await worker.close()
        for scaler in scalers:
            await scaler.close()
        await first.stop(grace_s=1)
        await second.stop(grace_s=1)
