"""Fixtures of the store contract suite; each test gets them on SQLite and PostgreSQL
through ``store`` (tests/conftest.py)."""

from __future__ import annotations

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.store import Store

from .harness import Harness


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def harness(store: Store, clock: FakeClock) -> Harness:
    return Harness.build(store, clock, CoordinatorConfig())
