"""Enqueue calls are items of the writer's batch: calls from many producers that arrive
while the writer is busy are committed together, in one transaction, and each is
answered only once it has committed; their backlog is bounded (a call past it waits);
and a shutdown still writes what is pending."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.domain.states import JobState
from coordinator.process import RunningCoordinator
from coordinator.store import Store
from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.held_writer import HeldWriter
from tests.support import eventually
from worker_sdk import AsyncClient


def _held_writer() -> HeldWriter:
    return HeldWriter("write_items", items_at=1)


@pytest.fixture
async def running(database_url: str) -> AsyncIterator[RunningCoordinator]:
    async with coordinator_without_wake_ups(database_url) as coordinator:
        yield coordinator


async def _fill_the_writer(running: RunningCoordinator, client: AsyncClient, held: HeldWriter) -> list[Any]:
    """Enqueues, one at a time, until every writer slot holds a batch: what comes next
    waits for the next batch."""
    slots = running.app.dispatcher.slots
    first: list[Any] = []
    while not slots.full:
        first.append(asyncio.create_task(client.enqueue(Task(f"first-{len(first)}", 1))))
        sent = len(first)
        await eventually(lambda: held.held >= sent, what="the batch on the writer")  # noqa: B023
    return first


async def test_concurrent_enqueues_commit_in_one_transaction(running: RunningCoordinator) -> None:
    held = _held_writer()
    transactions: list[float] = []
    observe = running.app.store.on_transaction

    def count(seconds: float) -> None:
        transactions.append(seconds)
        if observe is not None:
            observe(seconds)

    async with AsyncClient(running.target) as client:
        with held.installed():
            first = await _fill_the_writer(running, client, held)
            producers = [asyncio.create_task(client.enqueue(Task(f"p-{n}", 1))) for n in range(5)]
            pending = running.app.dispatcher.pending
            await eventually(lambda: len(pending.batch.enqueues) == 5, what="five calls waiting")
            assert not any(task.done() for task in first + producers)  # none answered before its commit
            running.app.store.on_transaction = count
            held.released.set()
            job_ids = await asyncio.gather(*producers)
            await asyncio.gather(*first)
    assert 5 in held.items_per_batch  # the five producers' calls, written together
    # One transaction for them (background passes may add one of their own).
    assert 1 <= len(transactions) <= len(first) + 2
    for job_id in job_ids:
        job = running.app.store.get_job(job_id)
        assert job is not None and job.state is JobState.AVAILABLE


async def test_past_the_backlog_bound_a_call_waits_for_the_next_batch(database_url: str) -> None:
    held = _held_writer()
    async with (
        coordinator_without_wake_ups(database_url, max_pending_enqueue_jobs=2) as running,
        AsyncClient(running.target) as client,
    ):
        with held.installed():
            first = await _fill_the_writer(running, client, held)
            pending = running.app.dispatcher.pending
            within = [asyncio.create_task(client.enqueue(Task(f"in-{n}", 1))) for n in range(2)]
            await eventually(lambda: pending.enqueued_jobs == 2, what="two jobs waiting")
            past = asyncio.create_task(client.enqueue(Task("past", 1)))
            await asyncio.sleep(0.3)
            assert pending.enqueued_jobs == 2 and not past.done()  # it waits for room
            held.released.set()
            job_ids = await asyncio.gather(*first, *within, past)
        for job_id in job_ids:
            assert running.app.store.get_job(job_id) is not None


async def test_a_shutdown_writes_the_pending_enqueues_before_it_stops(database_url: str) -> None:
    held = _held_writer()
    async with (
        coordinator_without_wake_ups(database_url) as running,
        AsyncClient(running.target) as client,
    ):
        with held.installed():
            first = await _fill_the_writer(running, client, held)
            waiting = [asyncio.create_task(client.enqueue(Task(f"w-{n}", 1))) for n in range(3)]
            pending = running.app.dispatcher.pending
            await eventually(lambda: len(pending.batch.enqueues) == 3, what="three calls waiting")
            stopping = asyncio.create_task(running.stop(grace_s=5))
            await asyncio.sleep(0.2)
            held.released.set()
            job_ids = await asyncio.gather(*first, *waiting)
            await stopping
    store = Store.open(database_url)
    try:
        assert all(store.get_job(job_id) is not None for job_id in job_ids)
    finally:
        store.close()
