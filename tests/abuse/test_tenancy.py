"""Queues are the tenancy boundary: tenant B, holding an enqueue token and a work token
restricted to its own queue, attacks tenant A's finished job on a real coordinator with
authentication on (real gRPC, real tokens, each engine).

The attack the finding reported: re-use A's guessable idempotency key to learn A's job
ID, name that job as the parent of a job in B's queue, and claim the child with B's
worker to receive A's output. Each step must now come back empty-handed, and the
coordinator keeps serving tenant A."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.test_auth import Api, metadata
from worker_sdk.proto.runwick.v1 import job_service_pb2

WIRE = "payments.capture"
SECRET = b'{"card_token":"tok_4111_SECRET","amount":4200}'
KEY = "capture-o-1"


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[RunningCoordinator]:
    config = CoordinatorConfig(database_url=database_url, port=0, auth_enabled=True, drain_timeout_s=1)
    running = await start_coordinator(config)
    yield running
    await running.stop(grace_s=1)


async def _enqueue(api: Api, token: str, queue: str, **fields: object) -> job_service_pb2.EnqueueResponse:
    job = job_service_pb2.NewJob(wire_name=WIRE, payload=b"{}", queue=queue, **fields)  # type: ignore[arg-type]
    request = job_service_pb2.EnqueueRequest(jobs=[job])
    response: job_service_pb2.EnqueueResponse = await api.jobs.Enqueue(request, metadata=metadata(token))
    return response


async def _refusal(call: object) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call  # type: ignore[misc]
    return refused.value.code().name, refused.value.details() or ""


async def _run(worker: RawWorker, output: bytes) -> str:
    """Claims, starts and succeeds one job with ``output``; its ID."""
    assignment = await worker.claim()
    assert (await worker.start(assignment.attempt_id)).granted
    await worker.succeed(assignment.attempt_id, output=output)
    return str(assignment.job_id)


@dataclass
class Tenants:
    """Tenant A's finished job, whose output holds a card token, and both tenants' tokens
    and (queue-restricted) workers."""

    api: Api
    a_enqueue: str
    b_enqueue: str
    b_both: str
    """Tenant B's token with enqueue and work, restricted to B's queue."""
    a_worker: RawWorker
    b_worker: RawWorker
    victim: str


@pytest.fixture
async def tenants(secured: RunningCoordinator) -> AsyncIterator[Tenants]:
    assert secured.bootstrap_token is not None
    async with grpc.aio.insecure_channel(secured.target) as channel:
        api = Api(channel, secured.bootstrap_token)
        _, a_enqueue = await api.create_token("tenant-a enqueue", ["enqueue"])
        _, a_work = await api.create_token("tenant-a worker", ["work"], ["tenant-a"])
        _, b_enqueue = await api.create_token("tenant-b enqueue", ["enqueue"])
        _, b_work = await api.create_token("tenant-b worker", ["work"], ["tenant-b"])
        _, b_both = await api.create_token("tenant-b enqueue+work", ["enqueue", "work"], ["tenant-b"])
        a_worker = RawWorker(secured.target, "a-worker", [WIRE], token=a_work, queues=["tenant-a"])
        b_worker = RawWorker(secured.target, "b-worker", [WIRE], token=b_work, queues=["tenant-b"])
        try:
            victim = (await _enqueue(api, a_enqueue, "tenant-a", idempotency_key=KEY)).jobs[0].id
            assert await _run(a_worker, SECRET) == victim
            yield Tenants(api, a_enqueue, b_enqueue, b_both, a_worker, b_worker, victim)
        finally:
            await a_worker.close()
            await b_worker.close()


async def test_a_guessed_idempotency_key_from_another_queue_names_a_new_job(tenants: Tenants) -> None:
    probe = (await _enqueue(tenants.api, tenants.b_enqueue, "tenant-b", idempotency_key=KEY)).jobs[0]

    assert probe.id != tenants.victim and not probe.existing
    assert await _run(tenants.b_worker, b"") == probe.id  # B's own job, nothing of A's
    # Within A's queue the key still names A's job.
    again = (await _enqueue(tenants.api, tenants.a_enqueue, "tenant-a", idempotency_key=KEY)).jobs[0]
    assert (again.id, again.existing) == (tenants.victim, True)


async def test_a_queue_restricted_token_cannot_try_keys_in_another_queue(tenants: Tenants) -> None:
    code, details = await _refusal(_enqueue(tenants.api, tenants.b_both, "tenant-a", idempotency_key=KEY))

    assert code == "PERMISSION_DENIED" and "tenant-a" in details
    assert tenants.victim not in details
    # Nothing was written into A's queue: A's worker finds only A's next job.
    mine = (await _enqueue(tenants.api, tenants.a_enqueue, "tenant-a")).jobs[0]
    assert (await tenants.a_worker.claim()).job_id == mine.id


async def test_a_queue_restricted_token_cannot_name_another_queues_job_as_parent(tenants: Tenants) -> None:
    never = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
    answers = [
        await _refusal(_enqueue(tenants.api, tenants.b_both, "tenant-b", parent_ids=[parent]))
        for parent in (tenants.victim, never)
    ]

    # The answer a job that never existed gets: existence does not leak.
    assert answers[0] == ("NOT_FOUND", answers[1][1].replace(never, tenants.victim))
    assert answers[1][0] == "NOT_FOUND"
    # Nothing was written: B's worker finds no job.
    child = (await _enqueue(tenants.api, tenants.b_both, "tenant-b")).jobs[0]
    assert (await tenants.b_worker.claim()).job_id == child.id


async def test_a_worker_never_receives_a_parent_output_from_a_queue_its_token_may_not_serve(
    tenants: Tenants,
) -> None:
    # The ID leaked anyway; an enqueue token without a queue restriction names it.
    child = (await _enqueue(tenants.api, tenants.b_enqueue, "tenant-b", parent_ids=[tenants.victim])).jobs[0]

    assignment = await tenants.b_worker.claim()

    assert assignment.job_id == child.id
    assert [p.job_id for p in assignment.parent_outputs] == []
    assert SECRET not in assignment.SerializeToString()
    # The coordinator keeps serving tenant A: its own child still gets the output.
    mine = (await _enqueue(tenants.api, tenants.a_enqueue, "tenant-a", parent_ids=[tenants.victim])).jobs[0]
    own = await tenants.a_worker.claim()
    assert own.job_id == mine.id
    assert [(p.job_id, p.output) for p in own.parent_outputs] == [(tenants.victim, SECRET)]
