"""Per-key running limits over real worker processes (docs/flow-control.md): a per-key
limit of 2, served by three workers of four slots each, never has more than 2 jobs of
one key running at any instant (read from the attempts' start and end), while more than
2 run across keys; on PostgreSQL the same holds with workers on two replicas."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from coordinator.process import RunningCoordinator
from tests.integration import test_queue_controls
from tests.integration.conftest import Coordinator
from tests.integration.test_queue_controls import _most_at_once
from tests.integration.worker_app import CooperativeSleep
from tests.support import WorkerProcess
from worker_sdk import AsyncClient, JobState

replicas = test_queue_controls.replicas
"""The fixture: two coordinators over one PostgreSQL database."""

pytestmark = pytest.mark.slow

KEYS = ("tenant:a", "tenant:b", "tenant:c")


async def _run_keyed(client: AsyncClient) -> dict[str, list[tuple[datetime, datetime]]]:
    """Four sleeping jobs of each key, enqueued key by key (a's first); each key's run
    intervals once all have succeeded."""
    job_ids = [
        (key, await client.enqueue(CooperativeSleep(0.3), concurrency_key=key))
        for key in KEYS
        for _ in range(4)
    ]
    intervals: dict[str, list[tuple[datetime, datetime]]] = {key: [] for key in KEYS}
    for key, job_id in job_ids:
        job = await client.wait(job_id, timeout=timedelta(seconds=60))
        assert job.state is JobState.SUCCEEDED and job.concurrency_key == key, job
        for attempt in await client.attempts(job_id):
            assert attempt.started_at is not None and attempt.finished_at is not None
            intervals[key].append((attempt.started_at, attempt.finished_at))
    return intervals


def _check(intervals: dict[str, list[tuple[datetime, datetime]]]) -> None:
    assert {key: len(runs) for key, runs in intervals.items()} == {key: 4 for key in KEYS}
    assert {key: _most_at_once(runs) for key, runs in intervals.items()} == {key: 2 for key in KEYS}
    assert _most_at_once([run for runs in intervals.values() for run in runs]) > 2


async def test_a_per_key_limit_of_two_holds_over_three_workers(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    warm = await client.enqueue(CooperativeSleep(0.0))  # the queue exists from here on
    await client.set_queue_key_limit("default", 2)
    for _ in range(3):
        spawn_worker(coordinator.target, TEST_CONCURRENCY=4)
    await client.wait(warm, timeout=timedelta(seconds=30))

    _check(await _run_keyed(client))


@pytest.mark.postgres
async def test_a_per_key_limit_holds_over_workers_on_two_replicas(
    replicas: tuple[RunningCoordinator, RunningCoordinator], spawn_worker: Callable[..., WorkerProcess]
) -> None:
    first, second = replicas
    async with AsyncClient(first.target) as client:
        warm = await client.enqueue(CooperativeSleep(0.0))
        await client.set_queue_key_limit("default", 2)
        for target in (first.target, second.target, second.target):
            spawn_worker(target, TEST_CONCURRENCY=4)
        await client.wait(warm, timeout=timedelta(seconds=30))

        _check(await _run_keyed(client))
