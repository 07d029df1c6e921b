"""At light load a job costs three write transactions: the enqueue (which claims it for
the waiting worker), the start, and the result, whose transaction also claims the
worker's next job: the SDK sends a slot's credit with the result that frees it, not
after the result's acknowledgement (which cost a fourth, empty, claim transaction)."""

from __future__ import annotations

from datetime import timedelta

from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.support import eventually
from worker_sdk import AsyncClient, JobContext, JobState, Worker

JOBS = 8


async def test_a_job_at_light_load_costs_three_write_transactions(database_url: str) -> None:
    async with coordinator_without_wake_ups(database_url) as running:
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
            before = len(transactions)
            for number in range(JOBS):
                job_id = await client.enqueue(Task(f"light-{number}", 0))
                info = await client.wait(job_id, timedelta(seconds=10))
                assert info.state is JobState.SUCCEEDED
            # The last result's transaction is written before its job reads as succeeded.
            written = len(transactions) - before
    # Under four per job, whatever background work (about one transaction in 2 s) falls in.
    assert 3 * JOBS <= written < 4 * JOBS, f"{written} transactions for {JOBS} jobs"
