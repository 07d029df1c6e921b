"""``GetQueue`` over the real gRPC server, on both engines (issue 41: every limit visible):
one queue with its controls, counts, keys at their limit or rate and what each control
holds back; an unknown queue is NOT_FOUND and a bad name INVALID_ARGUMENT, neither
reading anything; the scope rules are ListQueues' (a queue restriction bounds `work` and
`enqueue` only, docs/security.md); the SDK's sync and async clients answer alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest

from coordinator.process import RunningCoordinator
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.test_auth import Api, metadata, secured
from worker_sdk import (
    ArgumentError,
    AsyncClient,
    Client,
    JobNotFound,
    JobState,
    PermissionDenied,
    QueueInfo,
    QueueRateInfo,
)
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc, queue_pb2

__all__ = ["secured"]  # the fixture, imported for the scoped-token test


async def _enqueue(client: AsyncClient, key: str, count: int) -> None:
    for _ in range(count):
        await client.enqueue_raw("tests.echo", b"{}", queue="tenants", concurrency_key=key)


@pytest.fixture
async def keyed_queue(coordinator: Coordinator, client: AsyncClient) -> AsyncIterator[RawWorker]:
    """Queue ``tenants`` with a per-key limit of 1 and a per-key rate of 1/1h, a worker
    holding one claimed job of ``tenant:1`` (that key is at its limit and its window is
    full), and 5 available jobs: 2 more of ``tenant:1``, 2 of ``tenant:2``, 1 of the
    implicit key ''."""
    await _enqueue(client, "tenant:1", 3)
    await client.set_queue_key_limit("tenants", 1)
    await client.set_queue_rate("tenants", 1, 3600, per_key=True)
    worker = RawWorker(coordinator.target, "keyed", ["tests.echo"], queues=["tenants"])
    try:
        claimed = await worker.claim()  # tenant:1's: the only key with jobs yet
        assert (await client.get(claimed.job_id)).concurrency_key == "tenant:1"
        await _enqueue(client, "tenant:2", 2)
        await _enqueue(client, "", 1)
        yield worker
    finally:
        await worker.close()


async def test_a_keyed_queue_shows_its_limits_keys_and_what_each_control_holds_back(
    keyed_queue: RawWorker, client: AsyncClient
) -> None:
    shown = await client.get_queue("tenants")

    assert (shown.name, shown.paused, shown.concurrency_limit, shown.key_limit) == ("tenants", False, None, 1)
    assert shown.rate == QueueRateInfo(1, timedelta(hours=1), per_key=True)
    assert (shown.active_keys, shown.keys_at_limit, shown.keys_at_rate) == (1, 1, 1)
    assert shown.first_keys_at_limit == shown.first_keys_at_rate == ("tenant:1",)
    assert {s: n for s, n in shown.counts.items() if n} == {JobState.AVAILABLE: 5, JobState.RESERVED: 1}
    assert shown.oldest_available_age is not None
    # Of the 5 available: tenant:1's 2 wait on its limit, and tenant:2's second one (its
    # key has room for one); the rate holds back none of the 2 left (each key has room).
    assert shown.held_back == {"key_limit": 3, "rate": 0}
    assert shown.runnable == 2
    # What a listing gives for the queue, GetQueue gives too (and what only it weighs).
    [listed] = await client.list_queues()
    assert listed.held_back == {} and listed.runnable is None
    assert _listed_part(listed) == _listed_part(shown)


async def test_a_paused_limited_queue_charges_every_available_job_to_the_pause(
    keyed_queue: RawWorker, client: AsyncClient
) -> None:
    await client.set_queue_limit("tenants", 1)
    limited = await client.get_queue("tenants")
    assert limited.held_back == {"queue_limit": 5, "key_limit": 0, "rate": 0}
    assert limited.runnable == 0

    await client.pause_queue("tenants")
    paused = await client.get_queue("tenants")
    assert paused.paused and paused.held_back == {"queue_paused": 5} and paused.runnable == 0


async def test_a_queue_without_controls_shows_no_keys_and_holds_nothing_back(client: AsyncClient) -> None:
    await client.enqueue_raw("tests.echo", b"{}", queue="plain")

    shown = await client.get_queue("plain")

    assert (shown.key_limit, shown.rate, shown.active_keys, shown.keys_at_limit) == (None, None, None, None)
    assert shown.held_back == {} and shown.runnable == 1
    assert shown.counts[JobState.AVAILABLE] == 1


async def test_an_unknown_queue_is_not_found_and_a_bad_name_is_refused(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    await client.enqueue_raw("tests.echo", b"{}", queue="known")

    with pytest.raises(JobNotFound) as missing:
        await client.get_queue("nowhere")
    assert missing.value.reason == "QUEUE_NOT_FOUND" and "'nowhere'" in str(missing.value)

    for bad, reason in (("a b", "NAME_INVALID"), ("..", "NAME_INVALID"), ("q" * 129, "NAME_TOO_LONG")):
        with pytest.raises(ArgumentError) as refused:
            await client.get_queue(bad)
        assert (refused.value.status_code, refused.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
        assert "queue" in str(refused.value), str(refused.value)
    with pytest.raises(ArgumentError):
        await client.get_queue("")  # refused by the SDK before any call
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as empty:
            await admin.GetQueue(queue_pb2.GetQueueRequest(name=""))
        assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "queue: must not be empty" in (empty.value.details() or "")
    assert [q.name for q in await client.list_queues()] == ["known"]  # nothing was made


async def test_the_sync_client_answers_as_the_async_one(
    coordinator: Coordinator, keyed_queue: RawWorker, client: AsyncClient
) -> None:
    def sync(name: str) -> QueueInfo:
        with Client(coordinator.target) as opened:
            return opened.get_queue(name)

    shown = await asyncio.to_thread(sync, "tenants")

    expected = await client.get_queue("tenants")
    assert _listed_part(shown) == _listed_part(expected)
    assert (
        (shown.held_back, shown.runnable)
        == (expected.held_back, expected.runnable)
        == ({"key_limit": 3, "rate": 0}, 2)
    )
    with pytest.raises(JobNotFound):
        await asyncio.to_thread(sync, "nowhere")


async def test_get_queue_takes_the_read_scope_and_a_queue_restriction_does_not_bound_it(
    secured: RunningCoordinator,
) -> None:
    """As ListQueues: `read` shows any queue, a restriction to queues bounds `work` and
    `enqueue` only (docs/security.md), and a token without `read` is PERMISSION_DENIED
    whether the queue exists or not, so it learns nothing of another tenant's queues."""
    assert secured.bootstrap_token is not None
    async with grpc.aio.insecure_channel(secured.target) as channel:
        api = Api(channel, secured.bootstrap_token)
        _, reader = await api.create_token("tenant-a-reader", ["read", "enqueue"], ["tenant-a"])
        _, writer = await api.create_token("tenant-a-writer", ["enqueue", "work"], ["tenant-a"])
        async with AsyncClient(secured.target, token=secured.bootstrap_token) as admin:
            await admin.enqueue_raw("tests.echo", b"{}", queue="tenant-b")
            await admin.set_queue_key_limit("tenant-b", 2)
            [listed] = await admin.list_queues()

        async with AsyncClient(secured.target, token=reader) as client:
            shown = await client.get_queue("tenant-b")
            assert (shown.name, shown.key_limit) == (listed.name, listed.key_limit) == ("tenant-b", 2)
            assert [q.name for q in await client.list_queues()] == ["tenant-b"]
        async with AsyncClient(secured.target, token=writer) as client:
            for name in ("tenant-b", "tenant-a", "nowhere"):
                with pytest.raises(PermissionDenied):
                    await client.get_queue(name)
        with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
            await api.tokens.GetQueue(queue_pb2.GetQueueRequest(name="tenant-b"), metadata=metadata(None))
        assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _listed_part(queue: QueueInfo) -> dict[str, object]:
    """What a listing fills in, but the oldest due job's age (it grows between calls)."""
    left_out = {"oldest_available_age", "held_back", "runnable"}
    return {name: getattr(queue, name) for name in QueueInfo.__dataclass_fields__ if name not in left_out}
