"""Databases for tests: a SQLite file per test, and one PostgreSQL database per run.

PostgreSQL is required, never skipped: tests marked ``postgres`` fail when it cannot be
reached. Point ``RUNWICK_TEST_PG_ADMIN_URL`` at a server to use another one (default:
the local server on 127.0.0.1:5432 as user postgres); each run creates its own database
and drops it at the end.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from coordinator.store import Store
from coordinator.store.schema import metadata

pytest_plugins = ["worker_sdk.testing.pytest_plugin"]
"""The test coordinator's fixtures, as a user's project loads them (the package's
``pytest11`` entry point loads the same module once installed; pytest then skips this)."""

ADMIN_URL = os.environ.get(
    "RUNWICK_TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
DEFAULT_PORTS = (7233, 7234, 7235, 9233)
"""``runwick serve``'s default API, health, dashboard and metrics ports."""


@pytest.fixture(scope="session", autouse=True)
def default_ports_taken() -> Iterator[None]:
    """Holds the coordinator's default ports for the whole run, where they are free.

    Every test takes its ports from the OS: one that falls back on a default fails here,
    as it would on a machine where the quick start's coordinator is running.
    """
    held = []
    for port in DEFAULT_PORTS:
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
            held.append(sock)
        except OSError:  # taken already: by another test process, or a real coordinator
            sock.close()
    yield
    for sock in held:
        sock.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    name = f"runwick_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # a missing server must fail the run, loudly
        pytest.fail(
            f"PostgreSQL is required for the postgres tests and is not reachable at {ADMIN_URL}: {exc}"
        )
    url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    store = Store.open(url, create=True)
    store.close()
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _truncate(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        # The audit log refuses TRUNCATE (migration 0019); a test's cleanup lifts that
        # inside its own transaction, so no other session ever sees the trigger off.
        conn.execute(text("ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_truncate"))
        # Every table of the schema (not alembic's version table), whatever the migrations add.
        conn.execute(text("TRUNCATE " + ", ".join(table.name for table in metadata.sorted_tables)))
        conn.execute(text("ALTER TABLE audit_events ENABLE TRIGGER audit_events_no_truncate"))
    engine.dispose()


@pytest.fixture(params=ENGINES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, migrated, empty database of each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runwick.db'}"
    url: str = request.getfixturevalue("postgres_url")
    _truncate(url)
    return url


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    opened = Store.open(database_url, create=True)
    yield opened
    opened.close()
