"""Trust between workers, over the real API with authentication on: a worker cannot act
on another worker's attempt, whatever worker ID it claims; and a revoked worker token's
streams end on every replica, not only on the one that revoked it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.conftest import _truncate
from tests.integration.rawstream import RawWorker
from tests.integration.test_auth import Api, metadata
from tests.support import eventually
from worker_sdk.proto.runwick.v1 import admin_service_pb2, job_pb2, job_service_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

WIRE = "tests.matrix"


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[RunningCoordinator]:
    config = CoordinatorConfig(database_url=database_url, port=0, auth_enabled=True, drain_timeout_s=1)
    running = await start_coordinator(config)
    yield running
    await running.stop(grace_s=1)


async def test_a_worker_cannot_heartbeat_start_or_report_another_workers_attempt(
    secured: RunningCoordinator,
) -> None:
    assert secured.bootstrap_token is not None
    async with grpc.aio.insecure_channel(secured.target) as channel:
        api = Api(channel, secured.bootstrap_token)
        _, real_token = await api.create_token("default worker", ["work"])
        _, qa_token = await api.create_token("qa worker", ["work"], ["qa"])
        job_id = await api.enqueue()
        real = RawWorker(secured.target, "real-worker", [WIRE], token=real_token)
        # The forgers: a qa-only token, and the same token as the real worker with
        # another worker ID; each opens its own stream.
        forgers = [
            RawWorker(secured.target, "real-worker", [WIRE], token=qa_token, queues=["qa"]),
            RawWorker(secured.target, "forger", [WIRE], token=real_token),
        ]
        try:
            assignment = await real.claim()
            assert assignment.job_id == job_id
            assert (await real.start(assignment.attempt_id)).granted
            for forger in forgers:
                await forger.next("welcome")
                forger.send(heartbeat=pb.Heartbeat(attempt_ids=[assignment.attempt_id]))
                beat = await forger.next("heartbeat_answer")
                assert list(beat.lost_attempt_ids) == [assignment.attempt_id]  # type: ignore[attr-defined]
                assert not (await forger.start(assignment.attempt_id)).granted
                ack = await forger.succeed(assignment.attempt_id, output=b"forged")
                assert (ack.status, ack.reason) == (pb.ResultAck.STATUS_REJECTED, "ATTEMPT_NOT_HELD")

            job = await _job(api, job_id)
            assert (job.state, job.output) == (job_pb2.JOB_STATE_RUNNING, b"")
            ack = await real.succeed(assignment.attempt_id, output=b"real")
            assert ack.status == pb.ResultAck.STATUS_ACCEPTED
            job = await _job(api, job_id)
            assert (job.state, job.output) == (job_pb2.JOB_STATE_SUCCEEDED, b"real")
        finally:
            for worker in (real, *forgers):
                await worker.close()


async def _job(api: Api, job_id: str) -> job_pb2.Job:
    response = await api.jobs.GetJob(job_service_pb2.GetJobRequest(id=job_id), metadata=metadata(api.admin))
    return response.job


@pytest.fixture
async def secured_replicas(postgres_url: str) -> AsyncIterator[tuple[RunningCoordinator, RunningCoordinator]]:
    _truncate(postgres_url)
    config = CoordinatorConfig(
        database_url=postgres_url, port=0, auth_enabled=True, auth_cache_ttl_s=0.2, drain_timeout_s=1
    )
    first = await start_coordinator(config)
    second = await start_coordinator(config)
    yield first, second
    await first.stop(grace_s=1)
    await second.stop(grace_s=1)


@pytest.mark.postgres
async def test_revoking_a_worker_token_ends_its_streams_on_every_replica(secured_replicas) -> None:
    first, second = secured_replicas
    admin = first.bootstrap_token
    assert admin is not None and second.bootstrap_token is None  # one bootstrap for the database
    async with grpc.aio.insecure_channel(first.target) as channel:
        api = Api(channel, admin)
        token_id, token = await api.create_token("doomed worker", ["work"])
        _, other_token = await api.create_token("other worker", ["work"])
        doomed = RawWorker(second.target, "doomed", [WIRE], token=token)
        bystander = RawWorker(second.target, "bystander", [WIRE], token=other_token)
        try:
            await doomed.next("welcome")
            await bystander.next("welcome")
            await eventually(lambda: len(second.app.dispatcher.sessions) == 2)

            await api.tokens.RevokeToken(
                admin_service_pb2.RevokeTokenRequest(id=token_id), metadata=metadata(admin)
            )

            # The revoking replica has no stream of it; the other one ends it by itself.
            await eventually(
                lambda: {s.worker_id for s in second.app.dispatcher.sessions} == {"bystander"}, timeout=10
            )
            with pytest.raises((EOFError, grpc.aio.AioRpcError)):
                await doomed.next("assignment", timeout=10)
        finally:
            await doomed.close()
            await bystander.close()
