"""The Worker embedded in a host's own asyncio application, against the real coordinator."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from tests.integration.conftest import Coordinator
from worker_sdk import AsyncClient, JobContext, JobState, Worker, job


@job("tests.embedded.greet", version=2, upgraders={1: lambda old: {"name": old["who"], "punctuation": "!"}})
@dataclass
class Greet:
    name: str
    punctuation: str


async def test_worker_runs_inside_a_host_event_loop(coordinator: Coordinator, client: AsyncClient) -> None:
    worker = Worker(coordinator.target, concurrency=2, heartbeat_interval=timedelta(milliseconds=200))
    seen: list[tuple[str, int]] = []

    @worker.handler(Greet)
    async def greet(payload: Greet, ctx: JobContext) -> bytes:
        seen.append((ctx.job_id, ctx.execution_number))
        return f"hello {payload.name}{payload.punctuation}".encode()

    async with worker:  # the host's loop runs it: no loop of its own
        job_id = await client.enqueue(Greet("ada", "."), priority=5)
        info = await client.wait(job_id, timedelta(seconds=20))

    assert info.state is JobState.SUCCEEDED
    assert info.output == b"hello ada."
    assert seen == [(job_id, 1)]
    assert not worker.connected


async def test_an_old_payload_version_is_upgraded_before_the_handler(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    """A job enqueued by an older release (version 1 payload) runs through the upgrader."""
    from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

    stub = job_service_pb2_grpc.JobServiceStub(client._channel)  # the wire, as an old client wrote it
    response = await stub.Enqueue(
        job_service_pb2.EnqueueRequest(
            jobs=[
                job_service_pb2.NewJob(
                    wire_name="tests.embedded.greet", payload=b'{"who": "bob"}', payload_version=1
                )
            ]
        )
    )
    worker = Worker(coordinator.target, concurrency=1)

    @worker.handler(Greet)
    async def greet(payload: Greet, ctx: JobContext) -> bytes:
        return f"hello {payload.name}{payload.punctuation}".encode()

    await worker.start()
    try:
        info = await client.wait(response.jobs[0].id, timedelta(seconds=20))
    finally:
        await worker.stop()
    assert info.output == b"hello bob!"
