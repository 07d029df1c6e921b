"""Migration 0020 (queues' natural sort key) on a database at 0016 that holds queues:
each gets the key of its name, so listings after the upgrade are in natural order; the
downgrade drops the column and its index and keeps the queues. On both engines."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from coordinator.domain.naming import natural_key
from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade

from .migrations import upgrade_to_head_matching_the_models

NAMES = ["cq1", "cq10", "cq100", "cq2", "billing"]


def test_0020_gives_every_queue_its_natural_sort_key_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0019_audit_truncate")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO queues (name, paused, concurrency_limit, created_at_ms, updated_at_ms)"
                    " VALUES (:name, false, NULL, 1, 1)"
                ),
                [{"name": name} for name in NAMES],
            )

        upgrade(engine, "0020_queue_lifecycle")

        with engine.connect() as conn:
            rows = conn.execute(text("SELECT name, sort_key FROM queues ORDER BY sort_key, name"))
            assert [tuple(row) for row in rows] == [
                (name, natural_key(name)) for name in ["billing", "cq1", "cq2", "cq10", "cq100"]
            ]
        assert "ix_queues_sort_key" in {ix["name"] for ix in inspect(engine).get_indexes("queues")}

        command.downgrade(_config(engine), "0019_audit_truncate")

        assert "sort_key" not in {column["name"] for column in inspect(engine).get_columns("queues")}
        with engine.connect() as conn:
            assert sorted(row[0] for row in conn.execute(text("SELECT name FROM queues"))) == sorted(NAMES)
        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
