"""An idle coordinator leaves its database alone, and wakes when work comes.

The maintenance loops run every 50 ms here while they have something to watch and every
hour once a pass found nothing (``idle_interval_s``): a quiet second with workers
connected must then send no statement at all, where a loop that kept polling would send
dozens. A claim must wake lease expiry again (its lease is watched and, once lapsed,
recovered without anybody calling maintenance by hand).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from coordinator.config import CoordinatorConfig
from coordinator.domain.states import JobState
from coordinator.process import RunningCoordinator, start_coordinator
from tests.chaos.jobs import Task
from tests.integration.rawstream import RawWorker
from tests.support import eventually
from worker_sdk import AsyncClient

QUIET_S = 1.0
LEASE_MS = 300


@contextmanager
def statements() -> Iterator[list[str]]:
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", record)


@pytest.fixture
async def idle_coordinator(database_url: str) -> AsyncIterator[RunningCoordinator]:
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        maintenance_interval_s=0.05,
        queue_count_fold_interval_s=0.05,
        idle_interval_s=3600,
        health_check_interval_s=3600,  # the readiness check is not maintenance
        schedule_interval_s=3600,
    )
    running = await start_coordinator(config)
    yield running
    await running.stop(grace_s=1)


async def test_an_idle_coordinator_sends_no_statement_and_a_claim_wakes_lease_expiry(
    idle_coordinator: RunningCoordinator,
) -> None:
    app = idle_coordinator.app
    workers = [
        RawWorker(idle_coordinator.target, f"idle-{n}", ["chaos.task"], lease_ms=LEASE_MS) for n in (1, 2)
    ]
    try:
        for worker in workers:
            await worker.next("welcome")
        # The first passes find nothing to watch; then every loop sleeps its idle interval.
        await eventually(lambda: _all_idle(idle_coordinator), what="every maintenance loop idle", timeout=10)
        with statements() as quiet:
            await asyncio.sleep(QUIET_S)
        assert quiet == []

        async with AsyncClient(idle_coordinator.target) as client:
            job_id = await client.enqueue(Task("idle", 1))
        assignment = await workers[0].claim()
        assert assignment.job_id == job_id
        assert not app.lease_expiry.cadence.idle  # the claim woke it
        # Never started, never heartbeated: its lease lapses and the loop recovers it.
        await eventually(lambda: _state(idle_coordinator, job_id) is not JobState.RESERVED, timeout=10)
        [attempt] = await app.list_attempts(job_id)
        assert attempt.outcome is not None and attempt.outcome.value == "unstarted_abandoned"
    finally:
        for worker in workers:
            await worker.close()


def _all_idle(running: RunningCoordinator) -> bool:
    app = running.app
    return all(loop.cadence.idle for loop in (app.lease_expiry, app.due_promotion, app.count_folding))


def _state(running: RunningCoordinator, job_id: str) -> JobState:
    job = running.app.store.get_job(job_id)
    assert job is not None
    return job.state
