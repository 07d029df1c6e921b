"""Migration 0022 (jobs keep their W3C trace context) on a database at 0021 that holds a
job: the job gets no trace context and keeps everything else, and can then be given one;
the downgrade drops both columns and keeps the job. On both engines."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade

from .migrations import upgrade_to_head_matching_the_models
from .test_migration_0021_attempt_progress import JOB_ID, JOB_ROW

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
_COLUMNS = ", ".join(JOB_ROW)
_VALUES = ", ".join(f":{name}" for name in JOB_ROW)


def test_0022_adds_an_empty_trace_context_to_jobs_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0021_attempt_progress")
        with engine.begin() as conn:  # written out: the table at 0021 has no trace columns
            conn.execute(text(f"INSERT INTO jobs ({_COLUMNS}) VALUES ({_VALUES})"), JOB_ROW)

        upgrade(engine, "0022_job_trace_context")

        with engine.begin() as conn:
            row = conn.execute(text("SELECT wire_name, state, traceparent, tracestate FROM jobs")).one()
            assert tuple(row) == ("tests.echo", "running", None, None)
            conn.execute(text("UPDATE jobs SET traceparent = :t"), {"t": TRACEPARENT})
            assert conn.execute(text("SELECT traceparent FROM jobs")).scalar_one() == TRACEPARENT

        command.downgrade(_config(engine), "0021_attempt_progress")
        columns = {column["name"] for column in inspect(engine).get_columns("jobs")}
        assert not {"traceparent", "tracestate"} & columns
        with engine.connect() as conn:
            assert conn.execute(text("SELECT id FROM jobs")).scalar_one() == JOB_ID
        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
