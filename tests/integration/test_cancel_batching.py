"""Single-job cancels are items of the writer's batch, like enqueue calls: cancels from
many clients that arrive while the writer is busy are committed together, in one
transaction, and each is answered only once it has committed (a refused one fails
alone); their backlog is bounded with the enqueue calls' (a call past it waits); and a
shutdown still writes what is pending."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.states import JobState
from coordinator.errors import NotFound
from coordinator.process import RunningCoordinator
from coordinator.store import Store
from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.held_writer import HeldWriter
from tests.support import eventually
from worker_sdk import AsyncClient, JobNotFound
from worker_sdk import JobState as ClientState

MISSING_JOB = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"


def _held_writer() -> HeldWriter:
    return HeldWriter("write_cancels", items_at=2)


async def _jobs(client: AsyncClient, count: int) -> list[str]:
    return [await client.enqueue(Task(f"job-{n}", 1)) for n in range(count)]


async def _fill_the_writer(
    running: RunningCoordinator, client: AsyncClient, held: HeldWriter, job_ids: list[str]
) -> list[Any]:
    """Cancels, one at a time, until every writer slot holds a batch: what comes next
    waits for the next batch."""
    slots = running.app.dispatcher.slots
    first: list[Any] = []
    while not slots.full:
        first.append(asyncio.create_task(client.cancel(job_ids.pop())))
        sent = len(first)
        await eventually(lambda: held.held >= sent, what="the batch on the writer")  # noqa: B023
    return first


async def test_concurrent_cancels_commit_in_one_transaction_answered_after_it(database_url: str) -> None:
    held = _held_writer()
    transactions: list[float] = []
    async with (
        coordinator_without_wake_ups(database_url) as running,
        AsyncClient(running.target) as client,
    ):
        observe = running.app.store.on_transaction

        def count(seconds: float) -> None:
            transactions.append(seconds)
            if observe is not None:
                observe(seconds)

        job_ids = await _jobs(client, 8)
        with held.installed():
            first = await _fill_the_writer(running, client, held, job_ids)
            targets = job_ids[:4]
            cancels = [asyncio.create_task(client.cancel(job_id)) for job_id in [*targets, MISSING_JOB]]
            pending = running.app.dispatcher.pending
            await eventually(lambda: len(pending.batch.cancels) == 5, what="five cancels waiting")
            assert not any(task.done() for task in first + cancels)  # none answered before its commit
            assert all(running.app.store.get_job(job_id).state is JobState.AVAILABLE for job_id in targets)  # type: ignore[union-attr]
            running.app.store.on_transaction = count
            held.released.set()
            answers = await asyncio.gather(*cancels, return_exceptions=True)
            await asyncio.gather(*first)
        assert 5 in held.items_per_batch  # the five calls, written together
        # One transaction for them (background passes may add one of their own).
        assert 1 <= len(transactions) <= len(first) + 2
        assert isinstance(answers[-1], JobNotFound)  # the refused cancel failed alone
        assert [info.state for info in answers[:-1]] == [ClientState.CANCELLED] * 4  # type: ignore[union-attr]
        for job_id in targets:
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.CANCELLED


async def test_past_the_backlog_bound_a_cancel_waits_for_the_next_batch(database_url: str) -> None:
    held = _held_writer()
    async with (
        coordinator_without_wake_ups(database_url, max_pending_enqueue_jobs=2) as running,
        AsyncClient(running.target) as client,
    ):
        job_ids = await _jobs(client, 6)
        with held.installed():
            first = await _fill_the_writer(running, client, held, job_ids)
            pending = running.app.dispatcher.pending
            within = [asyncio.create_task(client.cancel(job_ids.pop())) for _ in range(2)]
            await eventually(lambda: pending.backlog == 2, what="two cancels waiting")
            past_job = job_ids.pop()
            past = asyncio.create_task(client.cancel(past_job))
            await asyncio.sleep(0.3)
            assert len(pending.batch.cancels) == 2 and not past.done()  # it waits for room
            held.released.set()
            await asyncio.gather(*first, *within, past)
        job = running.app.store.get_job(past_job)
        assert job is not None and job.state is JobState.CANCELLED


async def test_a_shutdown_writes_the_pending_cancels_before_it_stops(database_url: str) -> None:
    held = _held_writer()
    async with (
        coordinator_without_wake_ups(database_url) as running,
        AsyncClient(running.target) as client,
    ):
        job_ids = await _jobs(client, 6)
        with held.installed():
            first = await _fill_the_writer(running, client, held, job_ids)
            waiting_ids = job_ids[:3]
            waiting = [asyncio.create_task(client.cancel(job_id)) for job_id in waiting_ids]
            pending = running.app.dispatcher.pending
            await eventually(lambda: len(pending.batch.cancels) == 3, what="three cancels waiting")
            stopping = asyncio.create_task(running.stop(grace_s=5))
            await asyncio.sleep(0.2)
            held.released.set()
            answers = await asyncio.gather(*first, *waiting)
            await stopping
    assert all(info.state is ClientState.CANCELLED for info in answers)
    store = Store.open(database_url)
    try:
        for job_id in waiting_ids:
            job = store.get_job(job_id)
            assert job is not None and job.state is JobState.CANCELLED
    finally:
        store.close()


async def test_a_cancel_after_the_loop_stopped_is_written_on_its_own(database_url: str) -> None:
    async with coordinator_without_wake_ups(database_url) as running:
        async with AsyncClient(running.target) as client:
            [job_id] = await _jobs(client, 1)
        running.app.dispatcher.stop()
        assert not running.app.dispatcher.takes_calls
        managed = await running.app.cancel(job_id, SYSTEM_ACTOR)
        assert managed.state is JobState.CANCELLED
        with pytest.raises(NotFound):
            await running.app.cancel(MISSING_JOB, SYSTEM_ACTOR)
        job = running.app.store.get_job(job_id)
        assert job is not None and job.state is JobState.CANCELLED
