"""Planner statistics (``store.planner``): once the jobs or their attempts outgrow what
PostgreSQL's planner estimates, the store analyzes those tables, once per doubling;
SQLite keeps no statistics the store relies on, so there is nothing to refresh."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from coordinator.domain.records import NewJobSpec
from coordinator.store import planner

from .harness import QUEUE, WIRE, Harness

JOBS = planner.OUTGROWN_MIN_ROWS + 200
BATCH = 400


@pytest.fixture
def admin(harness: Harness) -> Iterator[Engine]:
    """An autocommit engine on the harness's database, to read and reset statistics."""
    engine = create_engine(harness.store.url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def estimates(admin: Engine) -> dict[str, float]:
    with admin.connect() as conn:
        rows = conn.execute(
            text("SELECT relname, reltuples FROM pg_class WHERE relname IN ('jobs', 'attempts')")
        )
        return {name: float(value) for name, value in rows}


def enqueue_many(harness: Harness, count: int) -> None:
    for start in range(0, count, BATCH):
        harness.enqueue_specs(
            [NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(min(BATCH, count - start))]
        )


def claim_all(harness: Harness, count: int) -> None:
    claimed = 0
    while claimed < count:
        got = harness.claim(min(harness.store.bounds.max_claim_batch, count - claimed))
        assert got, "ran out of claimable jobs"
        claimed += len(got)


def test_tables_that_outgrow_their_estimates_are_analyzed_once(harness: Harness, admin: Engine) -> None:
    postgres = harness.store.postgres
    if postgres:
        with admin.connect() as conn:
            conn.exec_driver_sql("ANALYZE jobs, attempts")  # the estimates of empty tables
        assert estimates(admin) == {"jobs": 0.0, "attempts": 0.0}
    assert harness.store.refresh_planner_statistics() == []  # nothing outgrown yet

    enqueue_many(harness, JOBS)  # counted from the deltas, before any fold
    assert harness.store.refresh_planner_statistics() == (["jobs"] if postgres else [])
    assert harness.store.refresh_planner_statistics() == []  # the estimate is right now

    claim_all(harness, JOBS)  # every claimed job has an attempt
    harness.store.transact(lambda tx: tx.fold_queue_counts(), what="a test")
    assert harness.store.refresh_planner_statistics() == (["attempts"] if postgres else [])
    if postgres:
        assert estimates(admin) == {"jobs": JOBS, "attempts": JOBS}


def test_a_store_analyzes_a_table_again_only_once_it_doubled(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role that may not analyze leaves the estimates as they were (the server only
    warns): the store does not ask at every fold. SQLite never asks."""
    analyzed: list[list[str]] = []
    monkeypatch.setattr(planner, "estimated_rows", lambda conn, tables: dict.fromkeys(tables, 0))
    monkeypatch.setattr(planner, "analyze", lambda conn, tables: analyzed.append(tables))
    expected = ["jobs"] if harness.store.postgres else []
    enqueue_many(harness, JOBS)
    assert harness.store.refresh_planner_statistics() == expected
    assert harness.store.refresh_planner_statistics() == []
    enqueue_many(harness, JOBS + planner.OUTGROWN_MIN_ROWS)  # more than doubled since
    assert harness.store.refresh_planner_statistics() == expected
    assert analyzed == ([["jobs"], ["jobs"]] if harness.store.postgres else [])
