"""The server around the lifecycle: health, reflection, graceful shutdown, bad input."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from coordinator.config import CoordinatorConfig
from coordinator.domain.records import JobRecord
from coordinator.process import start_coordinator
from tests.integration.conftest import Coordinator, coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from tests.support import health_status
from worker_sdk import ArgumentError, AsyncClient, JobNotFound, JobState
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb


async def test_health_and_reflection_are_served(coordinator: Coordinator) -> None:
    assert await health_status(coordinator.target) == health_pb2.HealthCheckResponse.SERVING
    assert (
        await health_status(coordinator.target, "runwick.v1.JobService")
        == health_pb2.HealthCheckResponse.SERVING
    )
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for response in stub.ServerReflectionInfo(iter([request])):
            names = {s.name for s in response.list_services_response.service}
            break
    assert {"runwick.v1.JobService", "runwick.v1.WorkerService", "grpc.health.v1.Health"} <= names


async def test_graceful_shutdown_turns_not_serving_and_drains_workers(database_url: str) -> None:
    running = await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, drain_timeout_s=10)
    )
    worker = RawWorker(running.target, "draining-worker", ["tests.echo"])
    await worker.next("welcome")
    stopping = asyncio.create_task(running.stop())

    drain = await worker.next("drain")
    assert isinstance(drain, pb.Drain)
    assert await health_status(running.target) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert not stopping.done()  # it waits for the worker to leave
    await worker.close()
    await asyncio.wait_for(stopping, 10)


async def test_enqueue_is_durable_across_a_restart(database_url: str) -> None:
    first = await start_coordinator(CoordinatorConfig(database_url=database_url, port=0))
    async with AsyncClient(first.target) as client:
        job_id = await client.enqueue(Echo("kept"), idempotency_key="durable-1")
    await first.stop(grace_s=1)

    second = await start_coordinator(CoordinatorConfig(database_url=database_url, port=0))
    try:
        async with AsyncClient(second.target) as client:
            info = await client.get(job_id)
            again = await client.enqueue(Echo("kept"), idempotency_key="durable-1")
    finally:
        await second.stop(grace_s=1)
    assert info.state is JobState.AVAILABLE
    assert again == job_id  # R-14 across restarts


async def test_bad_input_gets_a_clear_status_and_changes_nothing(
    coordinator: Coordinator, client: AsyncClient
):
    with pytest.raises(JobNotFound):
        await client.get("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")
    with pytest.raises(ArgumentError, match="not a UUID"):
        await coordinator_get_raw(coordinator, "not-an-id")
    assert coordinator.running.store.count_by_state() == {}


async def coordinator_get_raw(coordinator: Coordinator, job_id: str) -> None:
    """GetJob without the SDK's own ID check, to see the coordinator's answer."""
    from worker_sdk._errors import translated_rpc_errors
    from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        with translated_rpc_errors():
            await stub.GetJob(job_service_pb2.GetJobRequest(id=job_id))


async def test_wait_job_returns_at_its_timeout_when_not_terminal(
    coordinator: Coordinator, client: AsyncClient
):
    job_id = await client.enqueue(Echo("nobody runs me"))
    info = await client.wait(job_id, timedelta(milliseconds=200))
    assert info.state is JobState.AVAILABLE
    assert not info.terminal


async def test_wait_job_hears_an_end_committed_while_it_read_the_job(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job ends between WaitJob's first read (still running) and its going to sleep:
    the end is heard, not found by a re-read an idle interval (here an hour) later."""
    async with coordinator_without_wake_ups(database_url) as running:
        worker = RawWorker(running.target, "w1", ["tests.echo"])
        try:
            async with AsyncClient(running.target) as client:
                job_id = await client.enqueue(Echo("ends while read"))
                assignment = await worker.claim()
                assert (await worker.start(assignment.attempt_id)).granted
                app, reads = running.app, 0
                read = app.get_job

                async def ends_during_the_first_read(job_id: str) -> JobRecord:
                    nonlocal reads
                    reads += 1
                    job = await read(job_id)
                    if reads == 1:
                        await worker.succeed(assignment.attempt_id)  # committed and announced
                    return job

                monkeypatch.setattr(app, "get_job", ends_during_the_first_read)
                info = await asyncio.wait_for(client.wait(job_id, timedelta(minutes=5)), timeout=30)
                assert info.state is JobState.SUCCEEDED and reads == 2
        finally:
            await worker.close()


async def test_first_stream_message_must_be_hello(coordinator: Coordinator) -> None:
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

        call = worker_service_pb2_grpc.WorkerServiceStub(channel).Connect(
            iter([pb.ConnectRequest(credit=pb.Credit(count=1))])
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_stream_that_never_says_hello_is_ended(database_url: str) -> None:
    running = await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, hello_timeout_s=0.2)
    )
    try:
        async with grpc.aio.insecure_channel(running.target) as channel:
            from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

            silent = asyncio.Event()

            async def nothing():  # type: ignore[no-untyped-def]
                await silent.wait()
                yield pb.ConnectRequest()

            call = worker_service_pb2_grpc.WorkerServiceStub(channel).Connect(nothing())
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in call:
                    pass
            silent.set()
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert running.app.dispatcher.sessions == set()
    finally:
        await running.stop(grace_s=1)
