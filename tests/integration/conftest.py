"""A real coordinator on port 0 over each engine, and real worker processes.

The coordinator's clock is the host's clock plus an offset that tests can jump forward
(``coordinator.jump(ms)``), so leases and retry delays lapse without waiting them out
while handlers, heartbeats and timeouts in the worker processes run in real time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import OffsetClock
from coordinator.process import RunningCoordinator, start_coordinator
from tests.support import WorkerProcess, eventually_async, reap, start_worker
from worker_sdk import AsyncClient

WORKER_APP = "tests.integration.worker_app:worker"


@dataclass
class Coordinator:
    running: RunningCoordinator
    clock: OffsetClock

    @property
    def target(self) -> str:
        return self.running.target

    async def jump(self, ms: int) -> None:
        """Moves the coordinator's time forward and runs lease expiry and promotion."""
        self.clock.offset_ms += ms
        await self.running.run_maintenance()

    async def lapse_first_lease(self, client: AsyncClient, job_id: str, lease_ms: int) -> None:
        """Jumps past the lease of the job's first attempt, as often as it takes expiry
        to end that attempt.

        One jump is not always enough with a real worker process: a heartbeat it sent
        just before it gave the run up (or died) can still be in the coordinator's next
        batch, which then renews the lease from the jumped time, or holds the job's row
        while expiry passes over locked rows.
        """

        async def first_attempt_ended() -> bool:
            await self.jump(lease_ms + 1)
            return (await client.attempts(job_id))[0].outcome is not None

        await eventually_async(first_attempt_ended, what="lease expiry ended the first attempt")

    def connected_workers(self) -> set[str]:
        return {session.worker_id for session in self.running.app.dispatcher.sessions}


NO_WAKE_UPS = {"maintenance_interval_s": 3600, "idle_recheck_interval_s": 3600, "idle_interval_s": 3600}
"""Maintenance and idle re-checks an hour apart: only the path a test exercises can
deliver a job in time (``coordinator_without_wake_ups``)."""


@contextlib.asynccontextmanager
async def coordinator_without_wake_ups(database_url: str, **config: Any) -> AsyncIterator[RunningCoordinator]:
    """A coordinator on port 0 with ``NO_WAKE_UPS`` and ``config``, stopped afterwards."""
    running = await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, **NO_WAKE_UPS, **config)
    )
    try:
        yield running
    finally:
        await running.stop(grace_s=1)


@pytest.fixture
async def coordinator(database_url: str) -> AsyncIterator[Coordinator]:
    clock = OffsetClock()
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        maintenance_interval_s=3600,  # tests run expiry explicitly, after a jump
        idle_recheck_interval_s=0.5,
        idle_interval_s=0.5,  # idle workers re-check often (tests count claim rounds)
        drain_timeout_s=2,
    )
    running = await start_coordinator(config, clock=clock)
    yield Coordinator(running, clock)
    await running.stop(grace_s=1)


@pytest.fixture
async def client(coordinator: Coordinator) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(coordinator.target) as opened:
        yield opened


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts ``runwick worker tests.integration.worker_app:worker`` processes."""
    started: list[WorkerProcess] = []

    def spawn(target: str, app: str = WORKER_APP, **settings: object) -> WorkerProcess:
        worker = start_worker(app, target, tmp_path / f"worker-{len(started)}.log", **settings)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        reap(worker.process)
