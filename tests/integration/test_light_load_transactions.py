"""At light load a job costs three write transactions at most: the enqueue, which claims it
for the waiting worker; the start, in a worker batch, unless it came back in time to be
written in the enqueue's own transaction (``dispatch.joined_starts``: two then); and the
result, whose transaction also claims the worker's next job: the SDK sends a slot's
credit with the result that frees it, not after the result's acknowledgement (which
cost another, empty, claim transaction)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.support import eventually
from worker_sdk import AsyncClient, JobContext, JobState, Worker

JOBS = 8


@pytest.mark.perf
@pytest.mark.parametrize("join_start_wait_ms", [0.0, 10_000.0], ids=["claims-after-commit", "joined-starts"])
async def test_a_job_at_light_load_costs_three_write_transactions_or_two_when_its_start_joins(
    database_url: str, join_start_wait_ms: float
) -> None:
    """A wait long enough that every start joins its claim's transaction, or none."""
    async with coordinator_without_wake_ups(database_url, join_start_wait_ms=join_start_wait_ms) as running:
        store = running.app.store
        transactions: list[float] = []
        observe = store.on_transaction

        def count(seconds: float) -> None:
            transactions.append(seconds)
            if observe is not None:
                observe(seconds)

        store.on_transaction = count
        worker = Worker(running.target, concurrency=1)

        @worker.handler(Task)
        async def run(payload: Task, ctx: JobContext) -> None:
            return None

        async with AsyncClient(running.target) as client, worker:
            dispatcher = running.app.dispatcher
            await eventually(lambda: dispatcher.claim_rounds >= 1, what="the first credit's claim round")
            await eventually(lambda: not any(s.reserved for s in dispatcher.sessions), what="it to end")
            before, joined_before = len(transactions), dispatcher.joins.starts_joined
            for number in range(JOBS):
                job_id = await client.enqueue(Task(f"light-{number}", 0))
                info = await client.wait(job_id, timedelta(seconds=10))
                assert info.state is JobState.SUCCEEDED
            # The last result's transaction is written before its job reads as succeeded.
            written = len(transactions) - before
            joined = dispatcher.joins.starts_joined - joined_before
    assert joined == (JOBS if join_start_wait_ms else 0)
    per_job = 2 if join_start_wait_ms else 3
    # Whatever background work (about one transaction in 2 s) falls in besides.
    assert per_job * JOBS <= written < (per_job + 1) * JOBS, f"{written} transactions for {JOBS} jobs"


@pytest.mark.perf
async def test_idle_workers_whose_queue_ran_dry_claim_again_only_with_new_work(database_url: str) -> None:
    """Three workers wait on an empty queue. A run that ends gives its credit back, and
    that alone makes no claim: the worker's last claim found the queue empty and no work
    was heard of since. Each enqueue then finds every idle worker's credit free and
    claims in its own transaction (the batch it is written in), never in a claim
    transaction of its own."""
    async with coordinator_without_wake_ups(database_url) as running:
        workers = [Worker(running.target, concurrency=2) for _ in range(3)]
        for worker in workers:

            @worker.handler(Task)
            async def run(payload: Task, ctx: JobContext) -> None:
                return None

        async with AsyncClient(running.target) as client, workers[0], workers[1], workers[2]:
            dispatcher = running.app.dispatcher
            await eventually(lambda: len(dispatcher.sessions) == 3, what="three sessions")
            await eventually(
                lambda: all(s.drained and not s.reserved for s in dispatcher.sessions) or None,
                what="every worker's first claim to find the queue empty",
            )
            rounds = dispatcher.claim_rounds
            for number in range(JOBS):
                job_id = await client.enqueue(Task(f"dry-{number}", 0))
                info = await client.wait(job_id, timedelta(seconds=10))
                assert info.state is JobState.SUCCEEDED
            # Their results were written without a claim; the enqueues' batches claimed
            # for them, one claim round each.
            assert dispatcher.claim_rounds == rounds + JOBS


async def test_a_run_that_frees_a_limited_queue_lets_its_worker_claim_the_next_job(database_url: str) -> None:
    """A concurrency limit, not an empty queue, held jobs back: the claim is not drained,
    so the credit a run gives back claims again at once (no wake-up would come)."""
    async with coordinator_without_wake_ups(database_url) as running:
        worker = Worker(running.target, concurrency=3)

        @worker.handler(Task)
        async def run(payload: Task, ctx: JobContext) -> None:
            return None

        async with AsyncClient(running.target) as client:
            job_ids = await client.enqueue_many([Task(f"limited-{n}", 0) for n in range(3)])
            await client.set_queue_limit("default", 1)
            async with worker:
                for job_id in job_ids:
                    info = await client.wait(job_id, timedelta(seconds=10))
                    assert info.state is JobState.SUCCEEDED
