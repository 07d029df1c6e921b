"""Fixtures of the store contract suite; each test gets them on SQLite and PostgreSQL
through ``store`` (tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.store import Store
from tests.conftest import _truncate

from .harness import Harness


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def harness(store: Store, clock: FakeClock) -> Harness:
    return Harness.build(store, clock, CoordinatorConfig())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database nobody has migrated: a new SQLite file, or a scratch PostgreSQL
    database created (and dropped) next to the per-run test database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    base_url: str = request.getfixturevalue("postgres_url")
    name = f"runwick_scratch_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture
def replicas(postgres_url: str) -> Iterator[tuple[Harness, Harness]]:
    """Two coordinators' services, each over its own store, on one PostgreSQL database and
    one clock."""
    _truncate(postgres_url)
    clock = FakeClock()
    first, second = Store.open(postgres_url), Store.open(postgres_url)
    try:
        yield (
            Harness.build(first, clock, CoordinatorConfig()),
            Harness.build(second, clock, CoordinatorConfig()),
        )
    finally:
        first.close()
        second.close()
