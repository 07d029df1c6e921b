"""The outbox table made by the user's own migrations, on SQLite and PostgreSQL
databases that already hold data: the Alembic operation, and the Django app (its
migration, and jobs written by Django's ORM, relayed)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from alembic.migration import MigrationContext
from alembic.operations import Operations
from prometheus_client import CollectorRegistry
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, create_engine, insert, inspect, text

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.outbox_app import FAST, WIRE_NAME, Capture
from tests.support import ROOT, eventually
from tests.support.outbox import APP_ENGINES, postgres_app_url
from worker_sdk import AsyncClient
from worker_sdk.outbox import Outbox, OutboxRelay, outbox_table
from worker_sdk.outbox.alembic import create_outbox_table, drop_outbox_table

__all__ = ["postgres_app_url"]  # fixture


@pytest.fixture(params=APP_ENGINES)
def populated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An application database with an ``orders`` table holding rows, and no outbox."""
    url = (
        f"sqlite:///{tmp_path / 'app.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_app_url")
    )
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS runwick_outbox"))
        conn.execute(text("DROP TABLE IF EXISTS django_migrations"))
        conn.execute(text("DROP TABLE IF EXISTS orders"))
    orders = Table("orders", MetaData(), Column("id", Integer, primary_key=True), Column("note", String(50)))
    orders.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(orders), [{"note": f"order {n}"} for n in range(10)])
    yield engine
    engine.dispose()


@pytest.fixture
async def coordinator(tmp_path: Path) -> AsyncIterator[RunningCoordinator]:
    running = await start_coordinator(CoordinatorConfig(database_url=f"sqlite:///{tmp_path}/c.db", port=0))
    yield running
    await running.stop(grace_s=1)


def pending(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM runwick_outbox")).scalar_one())


async def relay_all(engine: Engine, target: str) -> list[str]:
    relay = OutboxRelay(engine, target, config=FAST, registry=CollectorRegistry())
    relay.check()
    relay.start()
    try:
        await eventually(lambda: pending(engine) == 0, what="the outbox emptied")
    finally:
        await asyncio.to_thread(relay.stop)
    async with AsyncClient(target) as client:
        return sorted([job.idempotency_key or "" async for job in client.list_jobs(wire_name=WIRE_NAME)])


async def test_the_alembic_operation_makes_the_table_the_writer_and_relay_use(
    populated: Engine, coordinator: RunningCoordinator
) -> None:
    with populated.begin() as conn, Operations.context(MigrationContext.configure(conn)):
        create_outbox_table()
    made = inspect(populated)
    expected = outbox_table()
    assert {c["name"]: c["nullable"] for c in made.get_columns("runwick_outbox")} == {
        c.name: c.nullable for c in expected.columns
    }
    assert [i["column_names"] for i in made.get_indexes("runwick_outbox")] == [["failed_at_ms", "id"]]
    with populated.begin() as conn:
        keys = Outbox().enqueue_many(conn, [Capture("a"), Capture("b")])
    assert await relay_all(populated, coordinator.target) == sorted(keys)
    with populated.begin() as conn, Operations.context(MigrationContext.configure(conn)):
        drop_outbox_table()
    assert not inspect(populated).has_table("runwick_outbox")
    assert inspect(populated).has_table("orders")


async def test_the_django_app_migrates_writes_in_atomic_blocks_and_its_rows_are_relayed(
    populated: Engine, coordinator: RunningCoordinator
) -> None:
    url = populated.url.render_as_string(hide_password=False)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.integration.outbox_django_app", url],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "refused: queue 'not/a/name' is not a valid name" in done.stderr
    keys = done.stdout.split()
    assert len(keys) == 2 and pending(populated) == 2
    assert await relay_all(populated, coordinator.target) == sorted(keys)
