"""The outbox's guarantees with real processes: relays killed with ``kill -9`` before,
during and after their ``Enqueue`` call, a coordinator stopped while rows are committed,
and two relays sharing one PostgreSQL outbox. Each committed row must become exactly
one job: the jobs' idempotency keys are compared with the keys the writes returned.
The application's database is SQLite or PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.outbox_app import WIRE_NAME, Capture, outbox
from tests.support import (
    ROOT,
    eventually,
    free_port,
    read_log,
    reap,
    runwick_command,
    serve,
    start_process,
    stop,
    wait_exit,
    wait_for_line,
    wait_listening,
)
from tests.support.outbox import app_engine, app_url, outbox_rows, postgres_app_url
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import AsyncClient

__all__ = ["app_engine", "app_url", "postgres_app_url"]  # fixtures

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RELAY_FLAGS = ("--batch-size", "10", "--poll-interval", "0.05", "--log-level", "DEBUG")


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[RunningCoordinator]:
    running = await start_coordinator(CoordinatorConfig(database_url=f"sqlite:///{tmp_path}/c.db", port=0))
    yield running
    await running.stop(grace_s=1)


def write_orders(engine: Engine, count: int, prefix: str, per_commit: int = 5) -> list[str]:
    keys: list[str] = []
    for start in range(0, count, per_commit):
        with engine.begin() as conn:
            orders = [Capture(f"{prefix}-{n}") for n in range(start, min(start + per_commit, count))]
            keys += outbox.enqueue_many(conn, orders)
    return keys


async def job_keys(target: str) -> list[str]:
    async with AsyncClient(target) as client:
        return [job.idempotency_key or "" async for job in client.list_jobs(wire_name=WIRE_NAME)]


def relay_command(app_url: str, target: str, *flags: str) -> list[str]:
    return runwick_command("outbox", "relay", "--database-url", app_url, "--target", target, *flags)


def crashing_relay(
    app_url: str, target: str, step: str, log: Path, delay_s: float = 0.002
) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests.integration.outbox_app", app_url, target, step, str(delay_s)]
    return start_process(command, log, env=ENV)


async def finish_with_a_fresh_relay(app_url: str, engine: Engine, target: str, log: Path) -> str:
    """Runs ``runwick outbox relay`` until the outbox is empty, stops it, and returns its
    closing line."""
    process = start_process(relay_command(app_url, target, *RELAY_FLAGS), log, env=ENV)
    try:
        await eventually(lambda: outbox_rows(engine) == 0, what="the fresh relay emptied the outbox")
        assert await stop(process, grace_s=10) == 0
    finally:
        reap(process)
    return next(line for line in read_log(log).splitlines() if "stopped; relayed" in line)


@pytest.mark.parametrize("step", ["before_send", "during", "after_ack"])
async def test_a_relay_killed_at_any_step_loses_and_duplicates_nothing(
    step: str, coordinator: RunningCoordinator, app_url: str, app_engine: Engine, tmp_path: Path
) -> None:
    keys = write_orders(app_engine, 25, step)
    crashing = crashing_relay(app_url, coordinator.target, step, tmp_path / "crash.log")
    try:
        assert await wait_exit(crashing, timeout=30) == -9, read_log(tmp_path / "crash.log")
    finally:
        reap(crashing)
    assert outbox_rows(app_engine) > 0  # the crash left rows behind: the batch in hand at least
    await finish_with_a_fresh_relay(app_url, app_engine, coordinator.target, tmp_path / "relay.log")
    assert sorted(await job_keys(coordinator.target)) == sorted(keys)


async def test_rows_committed_while_the_coordinator_is_down_wait_and_go_once_it_is_back(
    app_url: str, app_engine: Engine, tmp_path: Path
) -> None:
    port, serve_log = free_port(), tmp_path / "serve.log"
    serve_args = (
        "--database-url",
        f"sqlite:///{tmp_path}/c.db",
        "--port",
        str(port),
        "--insecure",
        *NO_FIXED_PORTS,
    )
    coordinator = serve(serve_log, *serve_args)
    relay_flags = (*RELAY_FLAGS, "--metrics-port", "0")
    relay = start_process(
        relay_command(app_url, f"127.0.0.1:{port}", *relay_flags), tmp_path / "relay.log", env=ENV
    )
    try:
        target = await wait_listening(coordinator, serve_log)
        before = write_orders(app_engine, 5, "before")
        await eventually(
            lambda: outbox_rows(app_engine) == 0, what="rows relayed while the coordinator was up"
        )
        assert await stop(coordinator) == 0
        during = write_orders(app_engine, 5, "during")
        await wait_for_line(relay, tmp_path / "relay.log", "rows wait, will retry with backoff")
        await asyncio.sleep(2)  # a few seconds down: the relay keeps backing off
        assert outbox_rows(app_engine) == 5
        coordinator = serve(serve_log, *serve_args)
        await wait_listening(coordinator, serve_log, count=2)
        await eventually(lambda: outbox_rows(app_engine) == 0, what="the waiting rows relayed")
        assert sorted(await job_keys(target)) == sorted(before + during)
        scraped = await _scrape(await wait_for_line(relay, tmp_path / "relay.log", "metrics on"))
        assert 'runwick_outbox_relayed_total{table="runwick_outbox"} 10.0' in scraped
        assert re.search(r'runwick_outbox_send_errors_total\{table="runwick_outbox"\} [1-9]', scraped)
        assert await stop(relay, grace_s=10) == 0
    finally:
        reap(relay)
        reap(coordinator)


async def _scrape(line: str) -> str:
    """The ``/metrics`` page the relay's line ``metrics on HOST:PORT/metrics`` names."""
    address = line.split("metrics on ")[1].strip()

    def get() -> str:
        with urllib.request.urlopen(f"http://{address}", timeout=10) as response:
            return str(response.read().decode())

    return await asyncio.to_thread(get)


@pytest.mark.postgres
async def test_two_relays_share_a_postgresql_outbox_without_sending_a_row_twice(
    coordinator: RunningCoordinator, postgres_app_url: str, tmp_path: Path
) -> None:
    from sqlalchemy import create_engine

    from tests.integration.outbox_app import metadata

    engine = create_engine(postgres_app_url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    logs = [tmp_path / "relay-1.log", tmp_path / "relay-2.log"]
    # Each holds its batch's rows locked for 50 ms before sending: the other skips them.
    relays = [crashing_relay(postgres_app_url, coordinator.target, "slow", log, delay_s=0.05) for log in logs]
    try:
        for relay, log in zip(relays, logs, strict=True):
            await wait_for_line(relay, log, "outbox relay app: started")
        keys = write_orders(engine, 200, "shared", per_commit=20)
        await eventually(lambda: outbox_rows(engine) == 0, what="the two relays emptied the outbox")
        for relay in relays:
            assert await stop(relay, grace_s=10) == 0
        counts = [int(re.findall(r"relayed (\d+)", read_log(log))[-1]) for log in logs]
        assert sum(counts) == 200 and min(counts) > 0, counts
        assert sorted(await job_keys(coordinator.target)) == sorted(keys)
    finally:
        for relay in relays:
            reap(relay)
        engine.dispose()


async def test_the_relay_command_refuses_bad_input_with_clear_errors(tmp_path: Path) -> None:
    cases = [
        ((), 2, "give the application's database with --database-url"),
        (("--database-url", "not a url"), 2, "not a SQLAlchemy database URL"),
        (("--database-url", "sqlite:///x.db", "--batch-size", "0"), 2, "batch_size must be 1-500"),
        (
            ("--database-url", "postgresql+psycopg://app:pw@127.0.0.1:1/app"),
            1,
            "cannot reach the application",
        ),
        (("--database-url", f"sqlite:///{tmp_path}/empty.db"), 1, "no table 'runwick_outbox'"),
    ]
    for flags, code, message in cases:
        done = await asyncio.to_thread(
            subprocess.run,
            runwick_command("outbox", "relay", "--target", "127.0.0.1:1", *flags),
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, message in done.stderr) == (code, True), done.stderr
        assert "pw@" not in done.stderr
