"""Queue controls over real worker processes (R-17): a concurrency limit of 2 served by
three workers never has more than 2 jobs running, read from the attempts' start and end
times; pausing stops new claims and resuming restarts them; on PostgreSQL the same
holds with two coordinator replicas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.conftest import _truncate
from tests.integration.conftest import Coordinator
from tests.integration.worker_app import CooperativeSleep
from tests.support import WorkerProcess, eventually
from worker_sdk import AsyncClient, JobState

pytestmark = pytest.mark.slow


def _most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals that overlap at one instant."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


async def _run_intervals(client: AsyncClient, job_ids: list[str]) -> list[tuple[datetime, datetime]]:
    intervals = []
    for job_id in job_ids:
        job = await client.wait(job_id, timeout=timedelta(seconds=60))
        assert job.state is JobState.SUCCEEDED, job
        for attempt in await client.attempts(job_id):
            assert attempt.started_at is not None and attempt.finished_at is not None
            intervals.append((attempt.started_at, attempt.finished_at))
    return intervals


async def test_a_limit_of_two_holds_over_three_workers(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    first = await client.enqueue(CooperativeSleep(0.0))  # the queue exists from here on
    await client.set_queue_limit("default", 2)
    for _ in range(3):
        spawn_worker(coordinator.target, TEST_CONCURRENCY=4)
    await client.wait(first, timeout=timedelta(seconds=30))

    job_ids = [await client.enqueue(CooperativeSleep(0.3)) for _ in range(8)]
    intervals = await _run_intervals(client, job_ids)

    assert len(intervals) == 8
    assert _most_at_once(intervals) == 2


async def test_pausing_stops_new_claims_and_resuming_restarts_them(
    coordinator: Coordinator,
    client: AsyncClient,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    warm = await client.enqueue(CooperativeSleep(0.0))
    spawn_worker(coordinator.target)
    await client.wait(warm, timeout=timedelta(seconds=30))

    paused = await client.pause_queue("default")
    assert paused.paused
    held = [await client.enqueue(CooperativeSleep(0.0)) for _ in range(3)]
    # The worker asks for work again and again (idle re-checks); none is handed out.
    rounds = coordinator.running.app.dispatcher.claim_rounds
    await eventually(lambda: coordinator.running.app.dispatcher.claim_rounds >= rounds + 3, timeout=20)
    assert {(await client.get(job_id)).state for job_id in held} == {JobState.AVAILABLE}

    await client.resume_queue("default")
    for job_id in held:
        assert (await client.wait(job_id, timeout=timedelta(seconds=30))).state is JobState.SUCCEEDED


@pytest.fixture
async def replicas(postgres_url: str) -> AsyncIterator[tuple[RunningCoordinator, RunningCoordinator]]:
    _truncate(postgres_url)
    config = CoordinatorConfig(
        database_url=postgres_url, port=0, idle_recheck_interval_s=0.2, drain_timeout_s=1
    )
    first = await start_coordinator(config)
    second = await start_coordinator(config)
    yield first, second
    await asyncio.gather(first.stop(grace_s=1), second.stop(grace_s=1))


@pytest.mark.postgres
async def test_a_limit_holds_over_workers_on_two_replicas(
    replicas: tuple[RunningCoordinator, RunningCoordinator], spawn_worker: Callable[..., WorkerProcess]
) -> None:
    first, second = replicas
    async with AsyncClient(first.target) as client:
        warm = await client.enqueue(CooperativeSleep(0.0))
        await client.set_queue_limit("default", 2)
        for target in (first.target, second.target, second.target):
            spawn_worker(target, TEST_CONCURRENCY=4)
        await client.wait(warm, timeout=timedelta(seconds=30))

        job_ids = [await client.enqueue(CooperativeSleep(0.3)) for _ in range(8)]
        intervals = await _run_intervals(client, job_ids)

    assert len(intervals) == 8
    assert _most_at_once(intervals) == 2
