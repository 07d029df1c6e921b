"""A worker waiting for work gets a new job in the enqueue's own transaction: when the
Enqueue call returns, the job is already reserved for it, without a dispatcher round. The
queue's controls hold there too, and credit not used goes back to the session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from coordinator.domain.states import JobState
from coordinator.process import RunningCoordinator
from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from tests.support import eventually
from worker_sdk import AsyncClient

WIRE = "chaos.task"


@pytest.fixture
async def running(database_url: str) -> AsyncIterator[RunningCoordinator]:
    async with coordinator_without_wake_ups(database_url) as coordinator:
        yield coordinator


async def _waiting_worker(running: RunningCoordinator) -> tuple[RawWorker, int]:
    """A worker with credit for two jobs and nothing claimable: it waits."""
    worker = RawWorker(running.target, "waiting-worker", [WIRE], capacity=2)
    await worker.next("welcome")
    worker.send(credit=worker_credit(2))
    dispatcher = running.app.dispatcher
    await eventually(lambda: sum(s.credit for s in dispatcher.sessions) == 2, what="the credit to arrive")
    # The credit's own claim round found nothing; from now on no round runs by itself.
    await eventually(lambda: dispatcher.claim_rounds >= 1, what="the credit's claim round")
    return worker, dispatcher.claim_rounds


def worker_credit(count: int) -> object:
    from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

    return pb.Credit(count=count)


async def test_an_enqueue_claims_for_a_waiting_worker_in_its_own_transaction(
    running: RunningCoordinator,
) -> None:
    worker, rounds = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            job_id = await client.enqueue(Task("at-once", 1))
            # Reserved when the call returns. The only session's credit was set aside for
            # the enqueue, so no dispatcher round can have claimed it meanwhile.
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RESERVED
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
            if not running.app.store.postgres:  # (PostgreSQL's NOTIFY wakes a round anyway)
                assert running.app.dispatcher.claim_rounds == rounds  # no round was needed
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (1, 0), what="one used, one back")
    finally:
        await worker.close()


async def test_a_paused_queue_is_not_claimed_by_an_enqueue_and_the_credit_comes_back(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            # A job due in an hour makes the queue known without anything to claim.
            await client.enqueue(Task("later", 1), run_at=datetime.now(UTC) + timedelta(hours=1))
            await client.pause_queue("default")
            job_id = await client.enqueue(Task("held", 1))
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.AVAILABLE
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (2, 0), what="the credit back")
            await client.resume_queue("default")
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
    finally:
        await worker.close()


async def test_a_refused_enqueue_gives_the_reserved_credit_back(running: RunningCoordinator) -> None:
    worker, _ = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            with pytest.raises(Exception, match="queue"):
                await client.enqueue(Task("bad", 1), queue="not a queue name!")
        [session] = running.app.dispatcher.sessions
        await eventually(lambda: (session.credit, session.reserved) == (2, 0), what="the credit back")
    finally:
        await worker.close()
