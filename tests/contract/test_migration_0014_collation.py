"""Migration 0014 (identifier columns collated "C" on PostgreSQL) on a database that
already holds a job from 0013: the job and its attempt are kept and still found by key,
every identifier column the metadata collates is collated so in the database, and the
downgrade gives the columns back the database's own collation. SQLite, which compares
text byte by byte already, is left as it was."""

from __future__ import annotations

from contextlib import closing

from alembic import command
from sqlalchemy import Engine, text

from coordinator.store import Store
from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, current_revision, head_revision, upgrade

from .test_migration_0002 import JOB_ID, _insert_0001_job
from .test_schema import collated_columns, database_collations

ATTEMPT_ID = "0193a7c2-5b1e-7c3d-9f00-aaaaaaaaaaaa"


def _insert_attempt(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO attempts (id, job_id, generation, worker_id, execution_number,"
                " claimed_at_ms, reported) VALUES (:id, :job, 1, 'w-1', 1, 1, false)"
            ),
            {"id": ATTEMPT_ID, "job": JOB_ID},
        )
        conn.execute(text("UPDATE jobs SET current_attempt_id = :id"), {"id": ATTEMPT_ID})


def test_0014_collates_the_identifiers_and_keeps_the_jobs(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0013_finished_indexes")
        _insert_0001_job(engine)
        _insert_attempt(engine)
        before = database_collations(engine)

        upgrade(engine, "0014_key_collation")

        after = database_collations(engine)
        if engine.dialect.name == "postgresql":
            assert {column for column, collation in before.items() if collation == "C"} == set()
            # Columns later migrations add (queues.sort_key, 0020) are not there yet.
            existing = {column for column in collated_columns() if column in after}
            assert {column for column, collation in after.items() if collation == "C"} == existing
        else:
            assert after == before
        upgrade(engine)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
    with closing(Store.open(unmigrated_url, create=False)) as store:
        job = store.get_job(JOB_ID)
        attempts = store.list_attempts(JOB_ID)
    assert job is not None and job.current_attempt_id == ATTEMPT_ID
    assert [attempt.id for attempt in attempts] == [ATTEMPT_ID]


def test_0014_downgrade_gives_back_the_database_collation(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0013_finished_indexes")
        before = database_collations(engine)
        upgrade(engine, "0014_key_collation")

        command.downgrade(_config(engine), "0013_finished_indexes")

        assert current_revision(engine) == "0013_finished_indexes"
        assert database_collations(engine) == before
    finally:
        engine.dispose()
