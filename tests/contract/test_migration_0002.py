"""Migration 0002 (tokens, audit log, cancel-requested flag) on a database that already
holds jobs from 0001: the jobs are kept, unflagged, and the schema then matches the
metadata exactly, on both engines."""

from __future__ import annotations

from sqlalchemy import Engine, text

from coordinator.store import Store
from coordinator.store.engine import create_write_engine
from coordinator.store.migrate import current_revision, upgrade

from .migrations import upgrade_to_head_matching_the_models

JOB_ID = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"


def _insert_0001_job(engine: Engine) -> None:
    columns = {
        "id": JOB_ID,
        "wire_name": "payments.capture",
        "queue": "default",
        "state": "running",
        "priority": 0,
        "run_at_ms": 1,
        "payload": b"{}",
        "payload_version": 1,
        "max_executions": 3,
        "retry_initial_delay_ms": 5_000,
        "retry_max_delay_ms": 60_000,
        "max_unstarted_abandonments": 5,
        "unstarted_initial_delay_ms": 1_000,
        "unstarted_max_delay_ms": 30_000,
        "generation": 1,
        "executions": 1,
        "unstarted_streak": 0,
        "created_at_ms": 1,
        "updated_at_ms": 1,
        "history_seq": 1,
    }
    names = ", ".join(columns)
    values = ", ".join(f":{name}" for name in columns)
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO jobs ({names}) VALUES ({values})"), columns)


def test_0002_keeps_existing_jobs_unflagged_and_reaches_the_metadata(unmigrated_url: str) -> None:
    engine = create_write_engine(unmigrated_url)
    try:
        upgrade(engine, "0001")
        assert current_revision(engine) == "0001"
        _insert_0001_job(engine)

        upgrade_to_head_matching_the_models(engine)
    finally:
        engine.dispose()
    store = Store.open(unmigrated_url, create=False)
    try:
        job = store.get_job(JOB_ID)
    finally:
        store.close()
    assert job is not None and (job.state.value, job.cancel_requested) == ("running", False)
