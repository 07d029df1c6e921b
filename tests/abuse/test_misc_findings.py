"""Smaller findings of issue 40, attacked on a real coordinator (port 0, both engines):
a schedule's tick cannot be taken over by an enqueue token, a cancel reaches only the
stream holding the attempt (not another tenant's stream with the same worker ID), and
a queue named dots alone is refused. After each attack the coordinator still serves
another client."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import OffsetClock
from coordinator.domain.schedules import idempotency_key
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.rawstream import RawWorker
from worker_sdk import ArgumentError, AsyncClient
from worker_sdk._errors import translated_rpc_errors
from worker_sdk.proto.runwick.v1 import job_service_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

HOUR_MS = 3_600_000


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[tuple[RunningCoordinator, OffsetClock]]:
    """A coordinator with tokens on, whose clock tests move (its own schedule loop is
    slowed down: tests run the passes themselves)."""
    clock = OffsetClock()
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        auth_enabled=True,
        maintenance_interval_s=3600,
        schedule_interval_s=3600,
        drain_timeout_s=1,
    )
    running = await start_coordinator(config, clock=clock)
    yield running, clock
    await running.stop(grace_s=1)


@contextlib.asynccontextmanager
async def client_with(running: RunningCoordinator, *scopes: str) -> AsyncIterator[AsyncClient]:
    """A client holding a new token with ``scopes`` (made with the bootstrap token)."""
    async with AsyncClient(running.target, token=running.bootstrap_token) as admin:
        created = await admin.create_token("-".join(scopes), list(scopes))
    async with AsyncClient(running.target, token=created.secret) as client:
        yield client


async def test_an_enqueue_token_cannot_take_over_a_schedules_next_tick(
    secured: tuple[RunningCoordinator, OffsetClock],
) -> None:
    running, clock = secured
    async with client_with(running, "manage", "read") as operator:
        await operator.create_schedule(
            "nightly", cron="0 * * * *", timezone="UTC", wire_name="reports.nightly", payload=b'{"real": 1}'
        )
        [schedule] = [s async for s in operator.list_schedules()]
        assert schedule.next_runs
        next_tick_ms = int(schedule.next_runs[0].timestamp() * 1000)

    stolen = idempotency_key("nightly", next_tick_ms)
    attack = job_service_pb2.NewJob(wire_name="attacker.job", payload=b'{"evil": 1}', idempotency_key=stolen)
    async with client_with(running, "enqueue") as attacker:
        with pytest.raises(ArgumentError) as refused:
            await _raw_enqueue(attacker, attack)
    assert refused.value.reason == "IDEMPOTENCY_KEY_RESERVED"
    assert "reserved for the jobs of schedules' ticks" in str(refused.value)

    clock.offset_ms += next_tick_ms - running.clock.now_ms()
    await running.app.run_schedules()

    async with client_with(running, "read") as reader:
        [schedule] = [s async for s in reader.list_schedules()]
        assert schedule.last_tick == datetime.fromtimestamp(next_tick_ms / 1000, UTC)
        assert schedule.last_job_id is not None
        ran = await reader.get(schedule.last_job_id)
        assert (ran.wire_name, ran.payload, ran.idempotency_key) == (
            "reports.nightly",
            b'{"real": 1}',
            stolen,
        )
        assert [job async for job in reader.list_jobs(wire_name="attacker.job")] == []


async def _raw_enqueue(client: AsyncClient, job: job_service_pb2.NewJob) -> Any:
    """Sends the job as a hand-made client would, past the SDK's own checks, on the
    client's channel with its token; errors come out as the SDK's exceptions."""
    with translated_rpc_errors():
        return await client._stub.Enqueue(job_service_pb2.EnqueueRequest(jobs=[job]), **client._call_kwargs())


async def test_a_cancel_reaches_only_the_stream_holding_the_attempt_not_a_namesake(
    secured: tuple[RunningCoordinator, OffsetClock],
) -> None:
    """Tenant B opens a stream with tenant A's worker ID, hoping to hear A's cancels
    (and so the IDs of A's attempts)."""
    running, _ = secured
    async with AsyncClient(running.target, token=running.bootstrap_token) as admin:
        tenant_a = (await admin.create_token("tenant-a", ["work"], queues=["tenant-a"])).secret
        tenant_b = (await admin.create_token("tenant-b", ["work"], queues=["tenant-b"])).secret
    holder = RawWorker(running.target, "shared-id", ["tests.tenant"], token=tenant_a, queues=["tenant-a"])
    namesake = RawWorker(running.target, "shared-id", ["tests.tenant"], token=tenant_b, queues=["tenant-b"])
    try:
        await holder.next("welcome")
        await namesake.next("welcome")
        async with client_with(running, "enqueue", "manage", "read") as operator:
            job = job_service_pb2.NewJob(wire_name="tests.tenant", payload=b"{}", queue="tenant-a")
            [enqueued] = (await _raw_enqueue(operator, job)).jobs
            assignment = await holder.claim()
            assert (await holder.start(assignment.attempt_id)).granted

            await operator.cancel(enqueued.id)

            cancel = await holder.next("cancel")
            assert isinstance(cancel, pb.Cancel) and cancel.attempt_id == assignment.attempt_id
            # The push was queued before the cancel call returned; whatever the namesake
            # reads before the answer to a message sent now was meant for it.
            namesake.send(start=pb.StartRequest(attempt_id=assignment.attempt_id))
            await namesake.next("start_answer")
            assert "cancel" not in namesake.kinds()
            assert assignment.attempt_id not in str(namesake.received[:-1])

            await holder.succeed(assignment.attempt_id)  # the holder is served on
            assert (await operator.get(enqueued.id)).cancel_requested
    finally:
        await holder.close()
        await namesake.close()


@pytest.mark.parametrize("queue", [".", "..", "..."])
async def test_a_queue_named_dots_alone_is_refused_and_the_coordinator_keeps_serving(
    database_url: str, queue: str
) -> None:
    running = await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, maintenance_interval_s=3600)
    )
    try:
        async with AsyncClient(running.target) as client:
            job = job_service_pb2.NewJob(wire_name="tests.dots", payload=b"{}", queue=queue)
            with pytest.raises(ArgumentError) as refused:
                await _raw_enqueue(client, job)
            error = refused.value
            assert error.status_code is grpc.StatusCode.INVALID_ARGUMENT
            assert error.reason == "NAME_INVALID"
            assert [v.field for v in error.field_violations] == ["jobs[0].queue"]
            assert "dots alone" in str(error)
            assert [q.name for q in await client.list_queues()] == []

            kept = job_service_pb2.NewJob(wire_name="tests.dots", payload=b"{}", queue="..a")
            await _raw_enqueue(client, kept)
            assert [q.name for q in await client.list_queues()] == ["..a"]
    finally:
        await running.stop(grace_s=1)
