"""What an operator relies on around the coordinator: metric series that stay bounded
however many queues and wire names callers invent, probes answered while the database
is still being migrated, and migrations that run one at a time (PostgreSQL)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from coordinator.config import CoordinatorConfig
from coordinator.metrics import OVERFLOW
from coordinator.process import start_coordinator
from coordinator.store.migrate import MIGRATION_LOCK_KEY, current_revision, head_revision
from tests.conftest import ADMIN_URL
from tests.support import (
    ROOT,
    eventually_async,
    free_port,
    health_status,
    runwick_command,
    serve,
    stop,
    wait_listening,
)
from worker_sdk import AsyncClient

pytestmark = pytest.mark.slow

SERVING, NOT_SERVING = 1, 2
LIMIT = 50
QUEUES, WIRE_NAMES = 200, 400


def scrape(port: int) -> dict[str, list[dict[str, str]]]:
    """The labels of every series at ``/metrics``, by sample name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        exposition = response.read().decode()
    series: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            series.setdefault(sample.name, []).append(sample.labels)
    return series


async def test_hundreds_of_queues_and_wire_names_make_a_bounded_number_of_series(
    database_url: str,
) -> None:
    config = CoordinatorConfig(
        database_url=database_url, port=0, metrics_port=0, metrics_max_label_values=LIMIT
    )
    running = await start_coordinator(config)
    try:
        assert running.metrics_port is not None
        async with AsyncClient(running.target) as client:
            job_ids = []
            for start in range(0, WIRE_NAMES, 50):  # an enqueue-only caller inventing names
                made = await asyncio.gather(
                    *(
                        client.enqueue_raw(f"tenant.job{n}", b"{}", queue=f"tenant-{n % QUEUES}")
                        for n in range(start, start + 50)
                    )
                )
                job_ids += [job.id for job in made]
            await running.check_database()
            series = await asyncio.to_thread(scrape, running.metrics_port)  # served by this loop
            enqueued = series["runwick_jobs_enqueued_total"]
            assert len({labels["wire_name"] for labels in enqueued}) == LIMIT + 1
            assert len({labels["queue"] for labels in enqueued}) == LIMIT + 1
            assert OVERFLOW in {labels["wire_name"] for labels in enqueued}
            depth = series["runwick_queue_depth"]
            assert len({labels["queue"] for labels in depth}) == LIMIT + 1
            assert len(depth) <= (LIMIT + 1) * 5  # the non-terminal states
            assert len(series["runwick_queue_oldest_available_job_age_seconds"]) == LIMIT + 1
            every = sum(len(labels) for labels in series.values())
            assert every < 5_000, every  # not one series per queue and wire name pair

            # Queues without jobs lose their gauge series; counters keep theirs.
            for job_id in job_ids:
                await client.cancel(job_id)
            await running.check_database()
            after = await asyncio.to_thread(scrape, running.metrics_port)
            assert "runwick_queue_depth" not in after
            assert "runwick_queue_oldest_available_job_age_seconds" not in after
            assert len(after["runwick_jobs_enqueued_total"]) == len(enqueued)
            completed = after["runwick_jobs_completed_total"]
            assert {labels["outcome"] for labels in completed} == {"cancelled"}
            assert len({labels["queue"] for labels in completed}) == LIMIT + 1
    finally:
        await running.stop(grace_s=1)


@pytest.fixture
def locked_sqlite(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A SQLite file whose write lock another connection holds."""
    path = tmp_path / "runwick.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE held (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    yield path, holder
    holder.close()


async def test_probes_answer_alive_and_not_ready_while_the_database_migrates(
    locked_sqlite: tuple[Path, sqlite3.Connection], tmp_path: Path
) -> None:
    """The health port binds before the store opens: a long SQLite migration (here one
    waiting for another connection's lock) keeps the pod alive and unready, never failing
    a startup probe for want of an answer."""
    path, holder = locked_sqlite
    health_port = free_port()
    log = tmp_path / "serve.log"
    process = serve(
        log,
        *("--database-url", f"sqlite:///{path}", "--insecure", "--port", "0"),
        *("--health-port", str(health_port), "--metrics-port", "-1", "--dashboard-port", "-1"),
        *("--sqlite-busy-timeout", "120"),
    )
    try:

        async def answering() -> bool:
            try:
                return await health_status(health_port, "liveness") == SERVING
            except Exception:  # not bound yet
                return False

        await eventually_async(answering, timeout=30)
        assert await health_status(health_port, "readiness") == NOT_SERVING
        assert await health_status(health_port, "") == SERVING  # "" follows liveness on this port
        assert "listening on" not in log.read_text()  # still opening the store
        holder.execute("ROLLBACK")

        await wait_listening(process, log)

        async def ready() -> bool:
            return await health_status(health_port, "readiness") == SERVING

        await eventually_async(ready)
        assert "database schema migrated from none to " in log.read_text()
    finally:
        assert await stop(process) == 0


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    """An empty PostgreSQL database (not migrated), dropped afterwards."""
    name = f"runwick_migrate_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def migrate(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        runwick_command("migrate", "--database-url", url, *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = await asyncio.to_thread(process.communicate, timeout=120)
    return process.returncode, out + err


@pytest.mark.postgres
async def test_migrations_take_turns_under_an_advisory_lock(fresh_postgres: str) -> None:
    engine = create_engine(fresh_postgres)
    try:
        with engine.connect() as holder:
            holder.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            code, said = await finished(migrate(fresh_postgres, "--lock-timeout", "1"))
            assert code == 2, said
            assert "another migration held the schema lock for over 1 s" in said
            assert current_revision(engine) is None  # nothing was migrated
            # One that waits without a limit goes on as soon as the lock is free.
            waiting = migrate(fresh_postgres, "--lock-timeout", "0")

            async def blocked() -> bool:
                with engine.connect() as conn:
                    row = conn.execute(
                        text(
                            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                        )
                    )
                    return bool(row.scalar_one())

            await eventually_async(blocked, timeout=30)
            holder.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            holder.commit()
            code, said = await finished(waiting)
            assert code == 0, said
        # Several at once (init containers of a rollout) all succeed, one after another.
        together = [migrate(fresh_postgres) for _ in range(3)]
        results = await asyncio.gather(*(finished(process) for process in together))
        assert all(code == 0 for code, _ in results), results
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
