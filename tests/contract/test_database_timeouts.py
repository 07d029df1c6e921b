"""Every transaction the coordinator opens is bounded (``DatabaseTimeouts``).

On PostgreSQL a replica frozen inside a transaction loses its session after
``idle_in_transaction_session_timeout``, so lease expiry on another replica (which skips
locked rows) recovers the job it held; a statement waiting on a lock fails after
``lock_timeout`` as a ``StoreError`` (UNAVAILABLE) instead of hanging. On SQLite a write
waits at most ``busy_timeout`` for another process's write lock.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, text, update

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.states import JobState
from coordinator.errors import Unavailable
from coordinator.scheduler.leases import expire_leases
from coordinator.service.work import AttemptMessage, WorkBatch
from coordinator.store import DatabaseTimeouts, Store, StoreError
from coordinator.store.engine import create_read_engine, create_write_engine
from coordinator.store.prepared import Prepared
from coordinator.store.schema import jobs
from tests.support import wait_until

from .harness import WIRE, Harness

LEASE_MS = 2_500
SHORT = DatabaseTimeouts(
    pg_idle_in_transaction_timeout_ms=300,
    pg_lock_timeout_ms=200,
    pg_statement_timeout_ms=700,
    sqlite_busy_timeout_ms=100,
)


@pytest.fixture
def replicas(postgres_url: str) -> Iterator[tuple[Store, Harness]]:
    """A store with short timeouts (the replica that stalls) and a healthy replica's
    harness over the same database and clock, with default timeouts."""
    stalling, healthy = Store.open(postgres_url, timeouts=SHORT), Store.open(postgres_url)
    try:
        yield stalling, Harness.build(healthy, FakeClock(), CoordinatorConfig())
    finally:
        stalling.close()
        healthy.close()


def _running_job(harness: Harness) -> tuple[str, str]:
    """A running job with a 2.5 s lease in a queue of its own: (job ID, attempt ID)."""
    queue = f"q-{uuid.uuid4().hex[:12]}"
    job_id = harness.enqueue(WIRE, queue=queue)
    claimed = harness.run(job_id, lease_ms=LEASE_MS)
    return job_id, claimed.attempt_id


@pytest.mark.postgres
def test_every_postgres_connection_of_the_store_carries_the_timeouts(postgres_url: str) -> None:
    engine = create_write_engine(f"{postgres_url}?options=-c%20lock_timeout%3D1234", SHORT)
    try:
        with engine.connect() as conn:
            shown = {
                name: conn.execute(text(f"SHOW {name}")).scalar()
                for name in ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")
            }
    finally:
        engine.dispose()
    # The URL's own options come after the configured ones, so a setting it names wins.
    assert shown == {
        "idle_in_transaction_session_timeout": "300ms",
        "lock_timeout": "1234ms",
        "statement_timeout": "700ms",
    }
    assert DatabaseTimeouts() == DatabaseTimeouts(10_000, 5_000, 30_000, 30_000)
    defaults = CoordinatorConfig()
    assert (
        defaults.pg_idle_in_transaction_timeout_ms,
        defaults.pg_lock_timeout_ms,
        defaults.pg_statement_timeout_ms,
        defaults.sqlite_busy_timeout_ms,
    ) == (10_000, 5_000, 30_000, 30_000)
    with pytest.raises(ValueError, match="pg_lock_timeout_ms"):
        DatabaseTimeouts(pg_lock_timeout_ms=-1)


@pytest.mark.postgres
@pytest.mark.parametrize("make_engine", [create_write_engine, create_read_engine], ids=["write", "read"])
def test_postgres_sessions_do_not_jit_unless_the_url_asks(postgres_url: str, make_engine: Any) -> None:
    """JIT would compile short statements for tens of milliseconds (engine.SESSION_SETTINGS)."""
    shown = []
    for url in (postgres_url, f"{postgres_url}?options=-c%20jit%3Don"):
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                shown.append(conn.execute(text("SHOW jit")).scalar())
        finally:
            engine.dispose()
    assert shown == ["off", "on"]


@pytest.mark.postgres
def test_a_replica_frozen_in_a_transaction_loses_its_locks_and_expiry_recovers_the_job(
    replicas: tuple[Store, Harness],
) -> None:
    """A replica stalls (SIGSTOP, a paused VM) holding a running job's row lock past the
    job's lease: the server ends its session after the idle-in-transaction timeout, and
    another replica's lease expiry, which skips locked rows, then recovers the job."""
    stalling, healthy = replicas
    job_id, attempt_id = _running_job(healthy)
    healthy.clock.advance(LEASE_MS)  # the lease has lapsed

    with pytest.raises(StoreError), stalling.write() as tx:
        assert job_id in tx.jobs_by_ids([job_id])  # FOR UPDATE: the row is locked
        # ... and the replica stalls here, in its transaction, saying nothing.
        expire_leases(healthy.ops)
        assert healthy.job(job_id).state is JobState.RUNNING  # skipped: the row is held

        _wait_for_expiry_to_recover(healthy, job_id)
    # The stalled replica wakes: its commit fails (the server ended the session).

    job = healthy.job(job_id)
    assert (job.state, job.current_attempt_id) == (JobState.SCHEDULED, None)
    [attempt] = healthy.attempts(job_id)
    assert attempt.id == attempt_id and attempt.outcome is not None


def _wait_for_expiry_to_recover(healthy: Harness, job_id: str) -> None:
    """Runs the healthy replica's lease expiry until it recovers the job (the stalled
    replica's session must have been ended for that: expiry skips locked rows)."""

    def recovered() -> bool:
        expire_leases(healthy.ops)
        return healthy.job(job_id).state is not JobState.RUNNING

    wait_until(recovered, timeout=15, interval=0.1, what="lease expiry to recover the held job")


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["prepared", "sqlalchemy"])
def test_a_replica_frozen_after_a_write_of_several_rows_still_loses_its_locks(
    replicas: tuple[Store, Harness], how: str
) -> None:
    """The same, frozen right after a statement run for several parameter sets
    (``executemany``, through the hot path's prepared statements or SQLAlchemy): psycopg
    would run it in pipeline mode, after which the server no longer ends the idle session
    (``store.pg_cursor``); the job must still be recovered."""
    stalling, healthy = replicas
    job_id, attempt_id = _running_job(healthy)
    healthy.clock.advance(LEASE_MS)
    stamp = update(jobs).where(jobs.c.id == bindparam("job"), jobs.c.queue == bindparam("b_queue"))

    with pytest.raises(StoreError), stalling.write() as tx:
        assert job_id in tx.jobs_by_ids([job_id])  # FOR UPDATE: the row is locked
        params = [{"job": job_id, "b_queue": "none"}, {"job": "no-such-job", "b_queue": "none"}]
        if how == "prepared":
            assert Prepared(stamp.values(updated_at_ms=0)).executemany(tx._conn, params) == 0
        else:
            tx._conn.execute(stamp.values(updated_at_ms=0), params)
        _wait_for_expiry_to_recover(healthy, job_id)

    assert healthy.job(job_id).state is JobState.SCHEDULED
    assert healthy.attempts(job_id)[0].id == attempt_id


@pytest.mark.postgres
def test_a_statement_waiting_on_a_lock_past_lock_timeout_is_unavailable_not_a_hang(
    replicas: tuple[Store, Harness],
) -> None:
    stalling, healthy = replicas
    job_id, attempt_id = _running_job(healthy)
    waiting = Harness.build(stalling, healthy.clock, CoordinatorConfig())

    with ThreadPoolExecutor(1) as pool, healthy.store.write() as holder:
        assert job_id in holder.jobs_by_ids([job_id])  # another replica holds the row
        message = AttemptMessage(attempt_id, healthy.holder(attempt_id))
        start = pool.submit(waiting.ops.process, WorkBatch(starts=[message]))  # locks the job
        with pytest.raises(StoreError) as failed:
            start.result(timeout=10)  # a guard only: lock_timeout is 0.2 s

    assert isinstance(failed.value, Unavailable)
    assert healthy.job(job_id).state is JobState.RUNNING  # the failed batch changed nothing


def test_sqlite_a_write_waits_for_another_process_lock_at_most_busy_timeout(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runwick.db'}"
    store = Store.open(url, timeouts=SHORT)
    other_process = sqlite3.connect(tmp_path / "runwick.db", isolation_level=None)
    try:
        harness = Harness.build(store, FakeClock(), CoordinatorConfig())
        other_process.execute("BEGIN IMMEDIATE")  # holds the write lock
        with ThreadPoolExecutor(1) as pool:
            enqueue = pool.submit(harness.enqueue)
            with pytest.raises(StoreError):
                enqueue.result(timeout=10)  # a guard only: busy_timeout is 0.1 s
        other_process.execute("ROLLBACK")
        assert harness.count_jobs() == 0
        harness.enqueue()  # the lock is free again
        assert harness.count_jobs() == 1
    finally:
        other_process.close()
        store.close()
