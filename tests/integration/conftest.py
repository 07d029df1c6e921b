"""A real coordinator on port 0 over each engine, and real worker processes.

The coordinator's clock is the host's clock plus an offset that tests can jump forward
(``coordinator.jump(ms)``), so leases and retry delays lapse without waiting them out
while handlers, heartbeats and timeouts in the worker processes run in real time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import OffsetClock
from coordinator.process import RunningCoordinator, start_coordinator
from worker_sdk import AsyncClient

ROOT = Path(__file__).resolve().parents[2]
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

    def connected_workers(self) -> set[str]:
        return {session.worker_id for session in self.running.app.dispatcher.sessions}


@pytest.fixture
async def coordinator(database_url: str) -> AsyncIterator[Coordinator]:
    clock = OffsetClock()
    config = CoordinatorConfig(
        database_url=database_url,
        port=0,
        maintenance_interval_s=3600,  # tests run expiry explicitly, after a jump
        idle_recheck_interval_s=0.5,
        drain_timeout_s=2,
    )
    running = await start_coordinator(config, clock=clock)
    yield Coordinator(running, clock)
    await running.stop(grace_s=1)


@pytest.fixture
async def client(coordinator: Coordinator) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(coordinator.target) as opened:
        yield opened


async def eventually(predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.05) -> None:
    """Waits until ``predicate()`` is truthy (a condition, not a timing assertion)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)


async def eventually_async(predicate: Callable[[], Awaitable[object]], timeout: float = 20.0) -> None:
    """Like ``eventually`` for a coroutine predicate (for example a read over gRPC)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(0.05)


@dataclass
class WorkerProcess:
    process: subprocess.Popen[str]
    log_path: Path

    async def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(self.process.wait, 10)

    async def terminate(self) -> int:
        """SIGTERM, then waits for the exit without blocking the coordinator's loop."""
        self.process.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.process.wait, 30)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Starts ``runwick worker tests.integration.worker_app:worker`` processes."""
    started: list[WorkerProcess] = []

    def spawn(target: str, app: str = WORKER_APP, **settings: object) -> WorkerProcess:
        env = {**os.environ, "RUNWICK_TARGET": target, "PYTHONPATH": str(ROOT)}
        env.update({key.upper(): str(value) for key, value in settings.items()})
        log_path = tmp_path / f"worker-{len(started)}.log"
        with log_path.open("w") as log_file:  # the child keeps its own descriptor
            process = subprocess.Popen(
                [sys.executable, "-m", "coordinator.cli", "worker", app, "--log-level", "DEBUG"],
                cwd=ROOT,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                text=True,
            )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(10)
