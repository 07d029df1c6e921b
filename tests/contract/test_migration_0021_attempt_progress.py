"""Migration 0021 (attempts keep their latest progress) on a database at 0020 that
holds an attempt: the attempt gets no progress and keeps everything else; the downgrade
drops the column and keeps the attempt. On both engines."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, upgrade
from coordinator.store.schema import jobs

from .migrations import upgrade_to_head_matching_the_models

JOB_ID = "01900000-0000-7000-8000-000000000001"
ATTEMPT_ID = "01900000-0000-7000-8000-000000000002"
JOB_ROW = {
    "id": JOB_ID,
    "wire_name": "tests.echo",
    "queue": "default",
    "state": "running",
    "priority": 0,
    "run_at_ms": 1,
    "payload": b"{}",
    "payload_version": 1,
    "max_executions": 3,
    "retry_initial_delay_ms": 1_000,
    "retry_max_delay_ms": 60_000,
    "max_unstarted_abandonments": 3,
    "unstarted_initial_delay_ms": 1_000,
    "unstarted_max_delay_ms": 60_000,
    "generation": 1,
    "executions": 1,
    "unstarted_streak": 0,
    "created_at_ms": 1,
    "updated_at_ms": 1,
    "history_seq": 0,
    "cancel_requested": False,
}


def _attempt_count(engine: object) -> int:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(text("SELECT count(*) FROM attempts")).scalar_one())


def test_0021_adds_an_empty_progress_to_attempts_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0020_queue_lifecycle")
        with engine.begin() as conn:
            conn.execute(jobs.insert().values(**JOB_ROW))  # the jobs table is the same at 0020
            conn.execute(
                text(
                    "INSERT INTO attempts (id, job_id, generation, worker_id, execution_number,"
                    " claimed_at_ms, reported) VALUES (:id, :job, 1, 'w', 1, 5, false)"
                ),
                {"id": ATTEMPT_ID, "job": JOB_ID},
            )

        upgrade(engine, "0021_attempt_progress")

        with engine.connect() as conn:
            row = conn.execute(text("SELECT worker_id, claimed_at_ms, progress FROM attempts")).one()
        assert tuple(row) == ("w", 5, None)

        command.downgrade(_config(engine), "0020_queue_lifecycle")
        assert "progress" not in {column["name"] for column in inspect(engine).get_columns("attempts")}
        assert _attempt_count(engine) == 1
        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
