"""The ``runwick`` command end to end against a real coordinator."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import ADMIN_URL
from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator
from tests.support.processes import NO_FIXED_PORTS

pytestmark = pytest.mark.slow


async def test_jobs_enqueue_get_list_for_people_and_scripts(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    enqueued = await runwick("jobs", "enqueue", "billing.invoice", "--payload", '{"n": 1}', "--json", *target)
    job_id = json.loads(enqueued.stdout)["enqueued"]["id"]
    await runwick(
        "jobs", "enqueue", "billing.invoice", "--run-at", "2099-01-01T00:00:00Z", "--queue", "late", *target
    )

    shown = await runwick("jobs", "get", job_id, *target)
    assert job_id in shown.stdout and "available" in shown.stdout and "billing.invoice" in shown.stdout

    as_json = json.loads((await runwick("jobs", "get", job_id, "--json", *target)).stdout)
    assert as_json["job"]["id"] == job_id
    assert as_json["attempts"] == []

    listed = await runwick("jobs", "list", "--json", *target)
    assert {j["queue"] for j in json.loads(listed.stdout)["jobs"]} == {"default", "late"}
    scheduled = await runwick("jobs", "list", "--state", "scheduled", *target)
    lines = scheduled.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["id", "state"] and len(lines) == 2 and "late" in lines[1]


async def test_jobs_commands_report_bad_input_clearly(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    bad_id = await runwick("jobs", "get", "not-a-uuid", *target, check=False)
    assert bad_id.returncode == 2  # bad input, found by the coordinator
    assert "INVALID_ARGUMENT" in bad_id.stderr and "not a UUID" in bad_id.stderr

    bad_name = await runwick("jobs", "enqueue", "has spaces", *target, check=False)
    assert bad_name.returncode == 2 and "wire_name" in bad_name.stderr

    bad_payload = await runwick("jobs", "enqueue", "ok.name", "--payload", "{nope", *target, check=False)
    assert bad_payload.returncode == 2 and "not JSON" in bad_payload.stderr
    assert coordinator.running.store.count_by_state() == {}


@pytest.mark.postgres
async def test_migrate_then_serve_on_postgresql(postgres_url: str) -> None:
    name = f"runwick_cli_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        refused = await runwick(
            "serve", "--database-url", url, "--port", "0", *NO_FIXED_PORTS, "--insecure", check=False
        )
        assert refused.returncode == 2
        assert "runwick migrate" in refused.stderr

        migrated = await runwick("migrate", "--database-url", url)
        assert "created the database schema (revision" in migrated.stdout
        again = await runwick("migrate", "--database-url", url)  # idempotent
        assert "already up to date" in again.stdout and "nothing changed" in again.stdout
        engine = create_engine(url)
        with engine.connect() as conn:
            tables = set(
                conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars()
            )
        engine.dispose()
        assert {"jobs", "attempts", "transitions", "alembic_version"} <= tables
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


async def test_worker_spec_must_name_module_and_attribute() -> None:
    result = await runwick("worker", "no_colon_here", check=False)
    assert result.returncode == 2 and "package.module:attribute" in result.stderr
