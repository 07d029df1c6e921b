"""Migration 0017 (keys per queue) on a database at 0016 that holds keyed jobs and a
dependency: existing keys keep working within their queue, the same key becomes free in
other queues, each dependency row learns its parent's queue (NULL when the parent was
purged), and the downgrade refuses, changing nothing, while a key is used in two queues.
On both engines."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import _config, current_revision, upgrade

from .migrations import upgrade_to_head_matching_the_models
from .test_migration_0002 import JOB_ID, _insert_0001_job

CHILD_ID = "0193a7c2-5b1e-7c3d-9f00-00000000000c"
PURGED_PARENT_ID = "0193a7c2-5b1e-7c3d-9f00-00000000000d"
OTHER_ID = "0193a7c2-5b1e-7c3d-9f00-00000000000e"


def _copy_job(conn: object, job_id: str, queue: str, key: str | None) -> None:
    """A copy of the job ``_insert_0001_job`` wrote, with its own ID, queue and key."""
    columns = [
        "wire_name", "state", "priority", "run_at_ms", "payload", "payload_version", "max_executions",
        "retry_initial_delay_ms", "retry_max_delay_ms", "max_unstarted_abandonments",
        "unstarted_initial_delay_ms", "unstarted_max_delay_ms", "generation", "executions",
        "unstarted_streak", "created_at_ms", "updated_at_ms", "history_seq",
    ]  # fmt: skip
    names = ", ".join(columns)
    conn.execute(  # type: ignore[attr-defined]
        text(
            f"INSERT INTO jobs (id, queue, idempotency_key, {names})"
            f" SELECT :id, :queue, :key, {names} FROM jobs WHERE id = :source"
        ),
        {"id": job_id, "queue": queue, "key": key, "source": JOB_ID},
    )


def _seed_0016(engine: Engine) -> None:
    _insert_0001_job(engine)  # queue "default"
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET idempotency_key = 'capture-o-1' WHERE id = :id"), {"id": JOB_ID})
        _copy_job(conn, CHILD_ID, "tenant-b", None)
        conn.execute(
            text(
                "INSERT INTO dependencies (child_id, parent_id, satisfied) VALUES"
                " (:child, :parent, false), (:child, :purged, false)"
            ),
            {"child": CHILD_ID, "parent": JOB_ID, "purged": PURGED_PARENT_ID},
        )


def _parent_queues(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT parent_id, parent_queue FROM dependencies"))
        return {parent: queue for parent, queue in rows}


def test_0017_makes_keys_per_queue_and_records_parent_queues(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0016_attempts_fillfactor")
        _seed_0016(engine)

        upgrade(engine, "0017_keys_per_queue")

        assert _parent_queues(engine) == {JOB_ID: "default", PURGED_PARENT_ID: None}
        with engine.begin() as conn:  # the same key in another queue is another job now
            _copy_job(conn, OTHER_ID, "tenant-b", "capture-o-1")
        with pytest.raises(IntegrityError), engine.begin() as conn:  # but not twice in one queue
            _copy_job(conn, "0193a7c2-5b1e-7c3d-9f00-00000000000f", "default", "capture-o-1")

        with pytest.raises(RuntimeError, match="used in more than one queue"):
            command.downgrade(_config(engine), "0016_attempts_fillfactor")
        assert current_revision(engine) == "0017_keys_per_queue"  # nothing changed

        with engine.begin() as conn:
            conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": OTHER_ID})
        command.downgrade(_config(engine), "0016_attempts_fillfactor")
        with pytest.raises(IntegrityError), engine.begin() as conn:  # the global key is back
            _copy_job(conn, OTHER_ID, "tenant-b", "capture-o-1")

        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
