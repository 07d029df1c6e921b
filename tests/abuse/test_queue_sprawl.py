"""Queue sprawl, attacked on a real coordinator (gRPC on port 0, SQLite file and
PostgreSQL): an enqueue token naming new queue after new queue is refused at
``max_queues`` (a clear RESOURCE_EXHAUSTED naming the limit, nothing enqueued) while
the coordinator keeps serving its existing queues and other clients; listings come a
bounded page at a time; queues purged empty are forgotten by retention, and an admin
can delete an empty one but not one that still holds jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.states import JobState as StoredState
from coordinator.process import RunningCoordinator, start_coordinator
from worker_sdk import (
    ArgumentError,
    AsyncClient,
    FailedPrecondition,
    JobState,
    PermissionDenied,
    QueueLimitReached,
)
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

MAX_QUEUES = 5
MAX_PAGE_SIZE = 3
WIRE = "tests.sprawl"


@pytest.fixture
async def coordinator(database_url: str) -> AsyncIterator[RunningCoordinator]:
    bounds = dataclasses.replace(StoreBounds(), max_queues=MAX_QUEUES, max_page_size=MAX_PAGE_SIZE)
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        auth_enabled=True,
        drain_timeout_s=1,
        bounds=bounds,
        retain_cancelled_ms=1,  # cancelled jobs are purged by the next retention pass
    )
    running = await start_coordinator(config)
    yield running
    await running.stop(grace_s=1)


@pytest.fixture
async def admin(coordinator: RunningCoordinator) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(coordinator.target, token=coordinator.bootstrap_token) as client:
        yield client


async def _secret(admin: AsyncClient, *scopes: str) -> str:
    return (await admin.create_token(f"only-{'-'.join(scopes)}", list(scopes))).secret


async def test_an_enqueue_token_cannot_create_queues_past_max_queues(
    coordinator: RunningCoordinator, admin: AsyncClient
) -> None:
    secret = await _secret(admin, "enqueue")
    async with AsyncClient(coordinator.target, token=secret) as attacker:
        for n in range(MAX_QUEUES):
            await attacker.enqueue_raw(WIRE, b"{}", queue=f"spam{n}")

        refused = 0
        for n in range(MAX_QUEUES, MAX_QUEUES + 20):
            with pytest.raises(QueueLimitReached) as error:
                await attacker.enqueue_raw(WIRE, b"{}", queue=f"spam{n}")
            refused += 1
        assert refused == 20
        assert error.value.status_code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.value.reason == "QUEUE_LIMIT_REACHED"
        assert "max_queues" in str(error.value) and str(MAX_QUEUES) in str(error.value)
        assert error.value.metadata["max_queues"] == str(MAX_QUEUES)

        # A batch naming many new queues is refused whole: not one of its jobs is stored.
        async with grpc.aio.insecure_channel(coordinator.target) as channel:
            stub = job_service_pb2_grpc.JobServiceStub(channel)
            batch = job_service_pb2.EnqueueRequest(
                jobs=[job_service_pb2.NewJob(wire_name=WIRE, payload=b"{}", queue="spam0")]
                + [job_service_pb2.NewJob(wire_name=WIRE, payload=b"{}", queue=f"new{n}") for n in range(400)]
            )
            with pytest.raises(grpc.aio.AioRpcError) as batch_error:
                await stub.Enqueue(batch, metadata=(("authorization", f"Bearer {secret}"),))
        assert batch_error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED

        # Existing queues still take jobs.
        await attacker.enqueue_raw(WIRE, b"{}", queue="spam0")

    # The bound held, nothing of the refused calls was stored, and other clients are served.
    queues = await admin.list_queues()
    assert [q.name for q in queues] == [f"spam{n}" for n in range(MAX_QUEUES)]
    assert sum(q.counts[JobState.AVAILABLE] for q in queues) == MAX_QUEUES + 1
    assert len(await _all_jobs(admin)) == MAX_QUEUES + 1


async def test_the_queue_listing_is_paged_and_bounded(
    coordinator: RunningCoordinator, admin: AsyncClient
) -> None:
    names = [f"cq{n}" for n in range(MAX_QUEUES)]
    for name in reversed(names):
        await admin.enqueue_raw(WIRE, b"{}", queue=name)

    async with AsyncClient(coordinator.target, token=await _secret(admin, "read")) as reader:
        page, token = await reader.list_queues_page(page_size=1_000_000)
        assert len(page) == MAX_PAGE_SIZE and token  # asked for a million, got one page
        rest, end = await reader.list_queues_page(page_size=1_000_000, page_token=token)
        assert [q.name for q in page + rest] == sorted(names) and end == ""

        for forged in ("not-a-token", token[:-2], "A" * 5_000):
            with pytest.raises(ArgumentError) as bad:
                await reader.list_queues_page(page_token=forged)
            assert bad.value.reason == "PAGE_TOKEN_INVALID"

        # Reading is not deleting: the read token is refused, and nothing changes.
        with pytest.raises(PermissionDenied):
            await reader.delete_queue("cq0")
    assert len(await admin.list_queues()) == MAX_QUEUES


async def test_queues_purged_empty_are_forgotten_and_an_admin_deletes_only_empty_ones(
    coordinator: RunningCoordinator, admin: AsyncClient
) -> None:
    """The newcomer's run: test queues whose jobs were purged stay listed no more."""
    for n in range(MAX_QUEUES - 1):
        await admin.cancel((await admin.enqueue_raw(WIRE, b"{}", queue=f"test{n}")).id)
    kept = (await admin.enqueue_raw(WIRE, b"{}", queue="live")).id

    with pytest.raises(FailedPrecondition) as busy:
        await admin.delete_queue("live")
    assert busy.value.reason == "QUEUE_NOT_EMPTY"
    assert busy.value.metadata["unfinished"] == "1"
    assert (await admin.get(kept)).state is JobState.AVAILABLE

    purged = await coordinator.app.run_retention()

    assert purged[StoredState.CANCELLED] == MAX_QUEUES - 1
    assert [q.name for q in await admin.list_queues()] == ["live"]
    # Room again: the forgotten queues no longer count towards max_queues.
    for n in range(MAX_QUEUES - 1):
        await admin.enqueue_raw(WIRE, b"{}", queue=f"again{n}")

    await admin.cancel(kept)
    await admin.purge_jobs(JobState.CANCELLED, timedelta(0))
    deleted = await admin.delete_queue("live")
    assert deleted.name == "live"
    assert "live" not in {q.name for q in await admin.list_queues()}
    events = [event async for event in admin.list_audit_events(action="queue.delete")]
    assert [(e.target, e.action) for e in events] == [("live", "queue.delete")]


async def _all_jobs(client: AsyncClient) -> list[object]:
    """Every job, following the pages."""
    return [job async for job in client.list_jobs()]
