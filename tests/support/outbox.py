"""Application databases for the outbox tests: a SQLite file, or a PostgreSQL database of
this run (apart from the coordinator's), each with an empty outbox table."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.engine import make_url

from tests.conftest import ADMIN_URL

APP_ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def postgres_app_url() -> Iterator[str]:
    """A PostgreSQL database of this run standing for the application's own."""
    name = f"runwick_app_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # a missing server must fail the run, loudly
        pytest.fail(
            f"PostgreSQL is required for the postgres tests and is not reachable at {ADMIN_URL}: {exc}"
        )
    yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=APP_ENGINES)
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The application's database with a fresh, empty outbox table."""
    from tests.integration.outbox_app import metadata

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'app.db'}"
    else:
        url = request.getfixturevalue("postgres_app_url")
    engine = create_engine(url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    engine.dispose()
    yield url


@pytest.fixture
def app_engine(app_url: str) -> Iterator[Engine]:
    engine = create_engine(app_url)
    yield engine
    engine.dispose()


def outbox_rows(engine: Engine, *, failed: bool = False) -> int:
    """Rows pending (or, with ``failed``, moved aside) in the default outbox table."""
    from tests.integration.outbox_app import outbox

    table = outbox.table
    condition = table.c.failed_at_ms.is_not(None) if failed else table.c.failed_at_ms.is_(None)
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(condition)).scalar_one())
