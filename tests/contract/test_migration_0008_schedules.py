"""Migration 0008_schedules on a database at 0007_unique_jobs: adds the schedule tables, reaches the
metadata exactly, and downgrades cleanly, on both engines."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, current_revision, head_revision, upgrade
from coordinator.store.schema import metadata


def test_0008_adds_the_schedule_tables_and_downgrades_cleanly(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0007_unique_jobs")
        assert not {"schedules", "schedule_skipped_ticks"} & set(inspect(engine).get_table_names())

        upgrade(engine, "0008_schedules")
        assert current_revision(engine) == "0008_schedules"
        assert {"schedules", "schedule_skipped_ticks"} <= set(inspect(engine).get_table_names())
        if head_revision() == "0008_schedules":
            with engine.connect() as conn:
                assert compare_metadata(MigrationContext.configure(conn), metadata) == []

        command.downgrade(_config(engine), "0007_unique_jobs")
        assert current_revision(engine) == "0007_unique_jobs"
        assert not {"schedules", "schedule_skipped_ticks"} & set(inspect(engine).get_table_names())
        upgrade(engine)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
