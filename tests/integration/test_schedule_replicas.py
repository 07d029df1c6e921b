"""Two real ``runwick serve`` processes on one PostgreSQL database: an every-second
schedule has each of its ticks enqueued exactly once (R-18), with no leader."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from coordinator.store.engine import normalize_url
from tests.conftest import _truncate
from tests.support import eventually, reap, serve, stop, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import AsyncClient

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KEY_PREFIX = "schedule:every-second:"
TICKS = 8


@pytest.fixture
async def two_replicas(postgres_url: str, tmp_path: Path) -> AsyncIterator[list[str]]:
    _truncate(postgres_url)
    processes: list[subprocess.Popen[str]] = []
    try:
        targets = []
        for index in range(2):
            log = tmp_path / f"serve-{index}.log"
            process = serve(
                log,
                *("--database-url", postgres_url, "--port", "0", "--insecure"),
                *NO_FIXED_PORTS,
            )
            processes.append(process)
            targets.append(await wait_listening(process, log))
        yield targets
        for process in processes:
            assert await stop(process) == 0
    finally:
        for process in processes:
            reap(process)
        _truncate(postgres_url)


def jobs_per_key(url: str) -> dict[str, int]:
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT idempotency_key, count(*) FROM jobs WHERE idempotency_key LIKE :prefix "
                    "GROUP BY idempotency_key"
                ),
                {"prefix": KEY_PREFIX + "%"},
            )
            return {key: int(count) for key, count in rows}
    finally:
        engine.dispose()


async def test_two_coordinator_processes_enqueue_each_tick_of_an_every_second_schedule_once(
    two_replicas: list[str], postgres_url: str
) -> None:
    first, second = two_replicas
    async with AsyncClient(first) as client:
        await client.create_schedule(
            "every-second", cron="* * * * * *", timezone="UTC", wire_name="tests.tick"
        )
        await eventually(lambda: len(jobs_per_key(postgres_url)) >= TICKS, timeout=60)
    async with AsyncClient(second) as client:
        # Paused through the other replica: once it answers, no pass enqueues another tick.
        await client.pause_schedule("every-second")
        [schedule] = [s async for s in client.list_schedules()]

    counts = jobs_per_key(postgres_url)
    assert set(counts.values()) == {1}, counts  # no tick twice
    seconds = sorted(int(datetime.fromisoformat(key.removeprefix(KEY_PREFIX)).timestamp()) for key in counts)
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds))), seconds  # none lost
    assert len(seconds) >= TICKS
    assert schedule.skipped_ticks == ()
    assert schedule.last_tick is not None and int(schedule.last_tick.timestamp()) == seconds[-1]
