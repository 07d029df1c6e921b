"""A worker whose streams a real coordinator keeps ending at their maximum age: each end
is torn down without asyncio ERRORs (a pending task destroyed, a running generator
closed), and the worker reconnects and keeps running jobs."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.support import eventually
from worker_sdk import AsyncClient, JobContext, Worker, job

_SYMPTOMS = ("Task was destroyed but it is pending", "asynchronous generator is already running")


@job("tests.rotation.tick")
@dataclass
class Tick:
    n: int


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def asyncio_records() -> Iterator[_Records]:
    handler = _Records()
    target = logging.getLogger("asyncio")
    target.addHandler(handler)
    try:
        yield handler
    finally:
        target.removeHandler(handler)


@pytest.fixture
async def rotating(tmp_path: Path) -> AsyncIterator[RunningCoordinator]:
    # The worker's side of a stream end does not depend on the engine: SQLite only.
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=f"sqlite:///{tmp_path / 'runwick.db'}",
            port=0,
            drain_timeout_s=2,
            idle_recheck_interval_s=0.2,
            max_connection_age_ms=300,
            max_connection_age_grace_ms=1_000,
        )
    )
    yield running
    await running.stop(grace_s=1)


async def test_streams_rotated_by_a_real_coordinator_leave_no_asyncio_errors(
    rotating: RunningCoordinator, asyncio_records: _Records
) -> None:
    registry = CollectorRegistry()
    worker = Worker(
        rotating.target,
        concurrency=2,
        metrics_registry=registry,
        reconnect_initial_delay=timedelta(milliseconds=10),
        reconnect_max_delay=timedelta(milliseconds=100),
    )
    runs: list[int] = []

    @worker.handler(Tick)
    async def tick(payload: Tick, ctx: JobContext) -> None:
        runs.append(payload.n)

    def reconnects() -> float:
        return registry.get_sample_value("runwick_worker_reconnects_total") or 0.0

    async with AsyncClient(rotating.target) as client, worker:
        await client.enqueue(Tick(0))
        await eventually(lambda: reconnects() >= 4, timeout=30, what="four streams ended by the coordinator")
        await client.enqueue(Tick(1))
        await eventually(lambda: sorted(runs) == [0, 1], timeout=30)
        gc.collect()  # what the ended streams left behind is collected now, not at exit
        # Finalizers that collection scheduled run while the next job goes through.
        await client.enqueue(Tick(2))
        await eventually(lambda: sorted(runs) == [0, 1, 2], timeout=30)
        await eventually(lambda: rotating.store.count_by_state() == {"succeeded": 3}, timeout=30)
        gc.collect()

    errors = [
        record.getMessage()
        for record in asyncio_records.records
        if record.levelno >= logging.ERROR or any(s in record.getMessage() for s in _SYMPTOMS)
    ]
    assert errors == []
