"""A database mistake costs ``migrate`` and ``serve`` one clear line and exit status 2:
what failed, the URL without its password, what to check. No traceback (31-156 lines
before), and in ``--log-format json`` one JSON object a parser can read."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import ADMIN_URL
from tests.e2e.cli import runwick
from tests.support.processes import NO_FIXED_PORTS

SERVE = ("serve", "--port", "0", *NO_FIXED_PORTS, "--database-url")


def assert_one_clear_line(result: object, *expected: str) -> str:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.returncode == 2, stderr  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    for text_ in expected:
        assert text_ in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("mysql://app@db.example/app", "Runwick runs on SQLite and PostgreSQL, not 'mysql'"),
        ("::::not a url", "does not parse"),
        ("sqlite:////nonexistent-dir/runwick.db", "does its directory exist"),
    ],
)
async def test_serve_says_what_is_wrong_with_its_database_url(url: str, said: str) -> None:
    result = await runwick(*SERVE, url, check=False)
    assert_one_clear_line(result, said, "--database-url")


async def test_migrate_says_the_server_refused_and_hides_the_password() -> None:
    result = await runwick(
        "migrate", "--database-url", "postgresql://app:s3cret@127.0.0.1:1/app", check=False
    )
    line = assert_one_clear_line(result, "Connection refused", "postgresql://app:***@127.0.0.1:1/app")
    assert "s3cret" not in line


@pytest.mark.postgres
async def test_migrate_names_a_missing_database_and_accepts_the_postgres_scheme(postgres_url: str) -> None:
    missing = make_url(ADMIN_URL).set(drivername="postgres", database=f"nope_{uuid.uuid4().hex[:8]}")
    result = await runwick(
        "migrate", "--database-url", missing.render_as_string(hide_password=False), check=False
    )
    assert_one_clear_line(result, "does not exist", "postgres://")

    name = f"runwick_scheme_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = (
            make_url(ADMIN_URL)
            .set(drivername="postgres", database=name)
            .render_as_string(hide_password=False)
        )
        assert url.startswith("postgres://")
        migrated = await runwick("migrate", "--database-url", url)
        assert "created the database schema" in migrated.stdout
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


async def test_json_logs_get_one_json_object_for_a_database_mistake() -> None:
    result = await runwick("serve", "--log-format", "json", *SERVE[1:], "mysql://app@db/app", check=False)
    line = assert_one_clear_line(result, "mysql")
    record = json.loads(line)
    assert record["level"] == "ERROR" and "Runwick runs on SQLite and PostgreSQL" in record["message"]
