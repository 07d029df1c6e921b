"""Several coordinator replicas over one PostgreSQL database (docs/scaling.md, R-13)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import OffsetClock
from coordinator.process import RunningCoordinator, start_coordinator
from tests.conftest import _truncate
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from tests.support import eventually
from worker_sdk import AsyncClient, JobState
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

pytestmark = pytest.mark.postgres


@pytest.fixture
async def replicas(postgres_url: str) -> AsyncIterator[tuple[RunningCoordinator, RunningCoordinator]]:
    _truncate(postgres_url)
    # No idle re-check and no maintenance pass: only LISTEN/NOTIFY can wake a replica.
    config = CoordinatorConfig(
        database_url=postgres_url, port=0, idle_recheck_interval_s=3600, maintenance_interval_s=3600
    )
    first = await start_coordinator(config)
    second = await start_coordinator(config)
    yield first, second
    await first.stop(grace_s=1)
    await second.stop(grace_s=1)


async def test_a_job_enqueued_on_one_replica_wakes_a_worker_on_another(replicas) -> None:
    first, second = replicas
    worker = RawWorker(first.target, "worker-on-first", ["tests.echo"])
    try:
        await worker.next("welcome")
        worker.send(credit=pb.Credit(count=1))
        # The first replica has looked for work and found none: from here only a
        # notification can wake it.
        await eventually(lambda: first.app.dispatcher.claim_rounds >= 1)
        async with AsyncClient(second.target) as client:
            job_id = await client.enqueue(Echo("across replicas"))
            assignment = await worker.next("assignment", timeout=20)
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
            assert (await worker.start(assignment.attempt_id)).granted  # type: ignore[attr-defined]
            ack = await worker.succeed(assignment.attempt_id, b"ok")  # type: ignore[attr-defined]
            info = await client.wait(job_id)
    finally:
        await worker.close()
    assert ack.status == ack.STATUS_ACCEPTED
    assert info.state is JobState.SUCCEEDED
    assert info.output == b"ok"


async def test_r13_replicas_read_time_from_the_database(replicas) -> None:
    first, second = replicas
    for replica in (first, second):
        assert isinstance(replica.clock, OffsetClock)
        database_now = replica.store.database_time_ms()
        assert database_now is not None
        # Anchored to the database's clock, whatever the host's says (generous bound:
        # two reads of two clocks, not a performance check).
        assert abs(replica.clock.now_ms() - database_now) < 2_000
