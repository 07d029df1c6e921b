"""Migration 0015 (transitions keyed by job and sequence) on a database at 0014 that holds
a job's history: the history is kept in order, a repeated sequence (which no guarded write
makes, but an old database might hold) keeps its first row, the table ends keyed by
(job_id, seq) with no foreign key and no other index, the old ID column stays for the
coordinators a rolling upgrade has not replaced yet, and the downgrade gives back the
surrogate key, the index and the foreign key with the rows. On both engines."""

from __future__ import annotations

from contextlib import closing

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from coordinator.store import Store
from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, current_revision, head_revision, upgrade
from coordinator.store.schema import metadata

from .test_migration_0002 import JOB_ID, _insert_0001_job

_HISTORY = [(1, None, "available", "enqueued"), (2, "available", "reserved", "claimed")]


def _insert_history(engine: Engine) -> None:
    rows = [{"seq": s, "from": f, "to": t, "reason": r} for s, f, t, r in _HISTORY]
    rows.append({"seq": 2, "from": "available", "to": "reserved", "reason": "a repeat"})
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO transitions (job_id, seq, at_ms, from_state, to_state, reason)"
                " VALUES (:job, :seq, 1, :from, :to, :reason)"
            ),
            [{"job": JOB_ID, **row} for row in rows],
        )


def _history(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        query = text(
            "SELECT seq, from_state, to_state, reason FROM transitions WHERE job_id = :job ORDER BY seq"
        )
        return [tuple(row) for row in conn.execute(query, {"job": JOB_ID})]


def _an_older_coordinator_still_reads_and_writes_the_history(engine: Engine) -> None:
    """What a coordinator of before 0015 sends, while a rolling upgrade has not replaced
    it yet: its history read names ``id``, its insert leaves the column out."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO transitions (job_id, seq, at_ms, from_state, to_state, reason)"
                " VALUES (:job, 3, 2, 'reserved', 'running', 'started')"
            ),
            {"job": JOB_ID},
        )
        read = text("SELECT id, job_id, seq FROM transitions WHERE job_id = :job ORDER BY seq")
        assert [row.seq for row in conn.execute(read, {"job": JOB_ID})] == [1, 2, 3]
        conn.execute(text("DELETE FROM transitions WHERE job_id = :job AND seq = 3"), {"job": JOB_ID})


def _sqlite_table_sql(engine: Engine) -> str:
    with engine.connect() as conn:
        query = text("SELECT sql FROM sqlite_master WHERE name = 'transitions'")
        return str(conn.execute(query).scalar_one())


def test_0015_keys_the_history_by_job_and_sequence_and_downgrades(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0014_key_collation")
        _insert_0001_job(engine)
        _insert_history(engine)

        upgrade(engine, "0015_transitions_key")

        schema = inspect(engine)
        assert schema.get_pk_constraint("transitions")["constrained_columns"] == ["job_id", "seq"]
        assert schema.get_foreign_keys("transitions") == []
        assert schema.get_indexes("transitions") == []
        columns = {column["name"]: column for column in schema.get_columns("transitions")}
        assert columns["id"]["nullable"]  # kept for the coordinators of before 0015 (below)
        if engine.dialect.name == "sqlite":
            assert "WITHOUT ROWID" in _sqlite_table_sql(engine)
        assert _history(engine) == _HISTORY
        _an_older_coordinator_still_reads_and_writes_the_history(engine)

        command.downgrade(_config(engine), "0014_key_collation")

        schema = inspect(engine)
        assert schema.get_pk_constraint("transitions")["constrained_columns"] == ["id"]
        assert [fk["referred_table"] for fk in schema.get_foreign_keys("transitions")] == ["jobs"]
        assert [ix["name"] for ix in schema.get_indexes("transitions")] == ["ix_transitions_job_seq"]
        assert _history(engine) == _HISTORY
        upgrade(engine)
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:  # the table rebuilt, then migrated on: as the metadata says
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    finally:
        engine.dispose()
    with closing(Store.open(unmigrated_url, create=False)) as store:
        kept = store.list_transitions(JOB_ID)
    assert [(t.seq, t.reason) for t in kept] == [(seq, reason) for seq, _, _, reason in _HISTORY]
