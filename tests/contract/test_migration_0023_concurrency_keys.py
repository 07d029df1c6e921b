"""Migration 0023 (concurrency keys and per-key limits) on a populated database at 0022:
existing jobs get the implicit key '', existing queues no per-key limit, and everything
else stays; the downgrade drops both columns and keeps the rows. On both engines."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade
from coordinator.store.schema import jobs

from .migrations import upgrade_to_head_matching_the_models
from .test_migration_0021_attempt_progress import JOB_ID, JOB_ROW


def test_0023_gives_existing_jobs_the_implicit_key_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0022_job_trace_context")
        with engine.begin() as conn:
            conn.execute(jobs.insert().values(**JOB_ROW))  # the key's column is left out
            conn.execute(
                text(
                    "INSERT INTO queues (name, paused, concurrency_limit, created_at_ms, updated_at_ms,"
                    " sort_key) VALUES ('default', false, 3, 1, 1, 'default')"
                )
            )

        upgrade(engine, "0023_concurrency_keys")

        with engine.connect() as conn:
            job = conn.execute(text("SELECT id, state, concurrency_key FROM jobs")).one()
            queue = conn.execute(text("SELECT name, concurrency_limit, key_limit FROM queues")).one()
        assert tuple(job) == (JOB_ID, "running", "")
        assert tuple(queue) == ("default", 3, None)

        command.downgrade(_config(engine), "0022_job_trace_context")
        assert "concurrency_key" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        assert "key_limit" not in {c["name"] for c in inspect(engine).get_columns("queues")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 1
            assert conn.execute(text("SELECT count(*) FROM queues")).scalar_one() == 1
        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
