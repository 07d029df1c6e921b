"""Credit above ``max_claim_batch`` is served right after the first claim, not at the next
wake-up: one claim takes at most ``max_claim_batch`` jobs, and a claim that took that many
is followed at once by another for the rest of the credit. (Idle re-checks are an hour
apart here, so only that refill can deliver the rest in time.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from coordinator.domain.bounds import StoreBounds
from coordinator.process import RunningCoordinator
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from worker_sdk import AsyncClient, EnqueueItem
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

from .worker_app import Echo

CLAIM_BATCH = 3
JOBS = 10


@pytest.fixture
async def coordinator(database_url: str) -> AsyncIterator[RunningCoordinator]:
    bounds = StoreBounds(max_claim_batch=CLAIM_BATCH)
    async with coordinator_without_wake_ups(database_url, drain_timeout_s=2, bounds=bounds) as running:
        yield running


@pytest.mark.parametrize("batches", [False, True], ids=["single messages", "batches"])
async def test_credit_above_the_claim_batch_is_served_at_once(
    coordinator: RunningCoordinator, batches: bool
) -> None:
    async with AsyncClient(coordinator.target) as client:
        await client.enqueue_many([EnqueueItem(Echo(text=str(n))) for n in range(JOBS)])
    worker = RawWorker(coordinator.target, "refill-worker", ["tests.echo"], capacity=JOBS, batches=batches)
    try:
        worker.send(credit=pb.Credit(count=JOBS))
        assignments = await asyncio.wait_for(_assignments(worker, JOBS), 10)
        assert len({a.job_id for a in assignments}) == JOBS
    finally:
        await worker.close()


async def _assignments(worker: RawWorker, count: int) -> list[pb.Assignment]:
    found: list[pb.Assignment] = []
    while len(found) < count:
        message = await worker.read()
        kind = message.WhichOneof("kind")
        if kind == "assignment":
            found.append(message.assignment)
        elif kind == "batch":
            found.extend(message.batch.assignments)
    return found
