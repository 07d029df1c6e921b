"""Migration 0024 (queue rates) on a database at 0023 that holds a limited queue: the
queue gets no rate and keeps its controls; the grants table is made; the downgrade drops
both and keeps the queue. On both engines."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade

from .migrations import upgrade_to_head_matching_the_models


def test_0024_adds_no_rate_to_existing_queues_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0023_concurrency_keys")
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO queues (name, paused, concurrency_limit, created_at_ms, updated_at_ms,"
                    " sort_key) VALUES ('mail', false, 3, 1, 2, 'mail')"
                )
            )

        upgrade(engine, "0024_queue_rates")

        with engine.connect() as conn:
            row = conn.execute(
                text("SELECT concurrency_limit, rate_count, rate_period_ms, rate_per_key FROM queues")
            ).one()
            slots = conn.execute(text("SELECT count(*) FROM queue_rate_slots")).scalar_one()
        assert (row[0], row[1], row[2], bool(row[3])) == (3, None, None, False)
        assert slots == 0

        command.downgrade(_config(engine), "0023_concurrency_keys")
        columns = {column["name"] for column in inspect(engine).get_columns("queues")}
        assert not columns & {"rate_count", "rate_period_ms", "rate_per_key"}
        assert "queue_rate_slots" not in inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT concurrency_limit FROM queues")).scalar_one() == 3
        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
