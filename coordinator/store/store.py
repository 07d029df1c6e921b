"""The store over SQLite and PostgreSQL.

``Store.write()`` opens one transaction and yields a ``WriteTx`` with the primitives the
service combines; every job update there is conditional on the state and attempt the
caller read (R-11). Dialect differences are confined to row locking (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL; SQLite has a single writer) and the database clock.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Select, and_, bindparam, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from coordinator.domain.states import CLAIMABLE_STATES, LEASED_STATES, JobState
from coordinator.store import migrate as migrations
from coordinator.store.engine import create_read_engine, create_write_engine, is_sqlite, normalize_url
from coordinator.store.records import AttemptRecord, JobRecord
from coordinator.store.schema import attempts, jobs, transitions

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "runwick_jobs_available"
"""The PostgreSQL channel that says claimable jobs appeared (SPEC §8)."""

HISTORY_LIMIT = 100
"""Transitions kept per job; older ones are dropped (SPEC §5)."""

_LIST_COLUMNS = [c for c in jobs.c if c.name not in ("payload", "output")]


class StoreError(Exception):
    """The database failed or refused; the message says which."""


class WriteConflict(StoreError):
    """A conditional write matched fewer rows than expected: someone changed the job."""


class DuplicateKey(StoreError):
    """An insert hit a unique key (an idempotency key raced with another enqueue)."""


@dataclass(slots=True)
class JobChange:
    """One conditional job update plus the transition it records."""

    job: JobRecord
    values: dict[str, Any]
    reason: str | None = None
    attempt_id: str | None = None
    extra_guard: dict[str, Any] = field(default_factory=dict)


class WriteTx:
    """The primitives of one write transaction."""

    def __init__(self, conn: Connection, postgres: bool) -> None:
        self.conn = conn
        self._postgres = postgres

    # -- reads that lock -------------------------------------------------------------

    def _locked(self, query: Select[Any], skip_locked: bool = False) -> Select[Any]:
        if self._postgres:
            return query.with_for_update(skip_locked=skip_locked)
        return query

    def jobs_by_ids(self, ids: Iterable[str]) -> dict[str, JobRecord]:
        ids = sorted(set(ids))
        if not ids:
            return {}
        # Locks in id order so concurrent batches on PostgreSQL cannot deadlock.
        query = self._locked(select(jobs).where(jobs.c.id.in_(ids)).order_by(jobs.c.id))
        return {r.id: r for r in map(JobRecord.from_row, self.conn.execute(query))}

    def attempts_by_ids(self, ids: Iterable[str]) -> dict[str, AttemptRecord]:
        ids = sorted(set(ids))
        if not ids:
            return {}
        rows = self.conn.execute(select(attempts).where(attempts.c.id.in_(ids)))
        return {r.id: r for r in map(AttemptRecord.from_row, rows)}

    def jobs_by_idempotency_keys(self, keys: Iterable[str]) -> dict[str, JobRecord]:
        keys = sorted(set(keys))
        if not keys:
            return {}
        rows = self.conn.execute(select(jobs).where(jobs.c.idempotency_key.in_(keys)))
        return {r.idempotency_key: r for r in map(JobRecord.from_row, rows) if r.idempotency_key}

    def claimable(
        self, queues: Sequence[str], wire_names: Sequence[str], now_ms: int, limit: int
    ) -> list[JobRecord]:
        """Claimable jobs in claim order: priority desc, run-at, id (R-17)."""
        query = (
            select(jobs)
            .where(
                jobs.c.queue.in_(list(queues)),
                jobs.c.state.in_([s.value for s in CLAIMABLE_STATES]),
                jobs.c.run_at_ms <= now_ms,
                jobs.c.wire_name.in_(list(wire_names)),
            )
            .order_by(jobs.c.priority.desc(), jobs.c.run_at_ms, jobs.c.id)
            .limit(limit)
        )
        return [JobRecord.from_row(r) for r in self.conn.execute(self._locked(query, skip_locked=True))]

    def expired_leases(self, now_ms: int, limit: int) -> list[JobRecord]:
        query = (
            select(jobs)
            .where(jobs.c.state.in_([s.value for s in LEASED_STATES]), jobs.c.lease_expires_at_ms <= now_ms)
            .order_by(jobs.c.id)
            .limit(limit)
        )
        return [JobRecord.from_row(r) for r in self.conn.execute(self._locked(query, skip_locked=True))]

    def due_scheduled(self, now_ms: int, limit: int) -> list[JobRecord]:
        query = (
            select(jobs)
            .where(jobs.c.state == JobState.SCHEDULED.value, jobs.c.run_at_ms <= now_ms)
            .order_by(jobs.c.run_at_ms, jobs.c.id)
            .limit(limit)
        )
        return [JobRecord.from_row(r) for r in self.conn.execute(self._locked(query, skip_locked=True))]

    # -- writes ----------------------------------------------------------------------

    def notify_jobs_available(self) -> None:
        """Wakes idle dispatchers on every replica when this transaction commits.

        One NOTIFY per transaction (PostgreSQL folds repeats of the same payload): NOTIFY
        takes a global lock at commit, so it must never be one per row. No-op on SQLite,
        which has one coordinator process.
        """
        if self._postgres:
            self.conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})

    def insert_jobs(self, rows: Sequence[dict[str, Any]], now_ms: int) -> None:
        """Inserts new jobs (``history_seq`` 1) and their first transitions."""
        if not rows:
            return
        try:
            self.conn.execute(insert(jobs), [{**row, "history_seq": 1} for row in rows])
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc
        self.conn.execute(
            insert(transitions),
            [
                {
                    "job_id": row["id"],
                    "seq": 1,
                    "at_ms": now_ms,
                    "from_state": None,
                    "to_state": row["state"],
                    "attempt_id": None,
                    "reason": "enqueued",
                }
                for row in rows
            ],
        )

    def apply(self, changes: Sequence[JobChange], now_ms: int) -> None:
        """Writes each change guarded by the state and attempt its caller read.

        Raises WriteConflict when any guard fails; the caller's transaction then rolls
        back whole, so nothing is half-written.
        """
        if not changes:
            return
        history: list[dict[str, Any]] = []
        seqs: dict[str, int] = {}
        for change in changes:
            seq = change.job.history_seq + 1
            values = {**change.values, "history_seq": seq, "updated_at_ms": now_ms}
            guard = [
                jobs.c.id == change.job.id,
                jobs.c.state == change.job.state.value,
                jobs.c.history_seq == change.job.history_seq,
            ]
            result = self.conn.execute(update(jobs).where(and_(*guard)).values(**values))
            if result.rowcount != 1:
                raise WriteConflict(
                    f"job {change.job.id} changed under a write (expected {change.job.state})"
                )
            seqs[change.job.id] = seq
            new_state = values.get("state", change.job.state)
            history.append(
                {
                    "job_id": change.job.id,
                    "seq": seq,
                    "at_ms": now_ms,
                    "from_state": change.job.state.value,
                    "to_state": str(new_state),
                    "attempt_id": change.attempt_id,
                    "reason": change.reason,
                }
            )
        self.conn.execute(insert(transitions), history)
        stale = [
            {"job_id": h["job_id"], "cut": h["seq"] - HISTORY_LIMIT}
            for h in history
            if h["seq"] > HISTORY_LIMIT
        ]
        if stale:
            self.conn.execute(
                transitions.delete().where(
                    transitions.c.job_id == bindparam("job_id"), transitions.c.seq <= bindparam("cut")
                ),
                stale,
            )

    def insert_attempts(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.conn.execute(insert(attempts), list(rows))

    def finish_attempt(self, attempt_id: str, values: dict[str, Any]) -> None:
        """Records an attempt's end once: an attempt that already has an outcome is kept."""
        result = self.conn.execute(
            update(attempts).where(attempts.c.id == attempt_id, attempts.c.outcome.is_(None)).values(**values)
        )
        if result.rowcount != 1:
            raise WriteConflict(f"attempt {attempt_id} already has an outcome")

    def mark_started(self, attempt_id: str, execution_number: int, now_ms: int) -> None:
        self.conn.execute(
            update(attempts)
            .where(attempts.c.id == attempt_id)
            .values(execution_number=execution_number, started_at_ms=now_ms)
        )

    def renew_leases(self, attempt_ids: Sequence[str], lease_until_ms: int) -> set[str]:
        """R-10: extends the leases of the current attempts among ``attempt_ids``.

        One statement for the whole heartbeat. Returns the attempt IDs renewed; the rest
        are lost to the worker.
        """
        if not attempt_ids:
            return set()
        statement = (
            update(jobs)
            .where(
                jobs.c.current_attempt_id.in_(sorted(set(attempt_ids))),
                jobs.c.state.in_([s.value for s in LEASED_STATES]),
            )
            .values(lease_expires_at_ms=lease_until_ms)
            .returning(jobs.c.current_attempt_id)
        )
        return {row[0] for row in self.conn.execute(statement)}


class Store:
    """Owns the engines; hands out write transactions and answers reads."""

    def __init__(self, url: str) -> None:
        self.url = normalize_url(url)
        self.postgres = not is_sqlite(self.url)
        self._write_engine = create_write_engine(self.url)
        self._read_engine = create_read_engine(self.url, self._write_engine)

    @classmethod
    def open(cls, url: str, *, create: bool | None = None) -> Store:
        """Opens the store. SQLite is created and migrated on first open; PostgreSQL
        must have been migrated (``runwick migrate``) unless ``create`` is true."""
        store = cls(url)
        create = (not store.postgres) if create is None else create
        try:
            if create:
                store.migrate()
            else:
                migrations.require_current(store._write_engine)
        except Exception:
            store.close()
            raise
        return store

    def migrate(self) -> None:
        migrations.upgrade(self._write_engine)

    def close(self) -> None:
        self._write_engine.dispose()
        if self._read_engine is not self._write_engine:
            self._read_engine.dispose()

    @contextlib.contextmanager
    def write(self) -> Iterator[WriteTx]:
        """One write transaction; commits when the block ends without an exception."""
        try:
            with self._write_engine.begin() as conn:
                yield WriteTx(conn, self.postgres)
        except (OperationalError, DBAPIError) as exc:
            raise StoreError(f"database error: {exc.orig}") from exc

    def database_time_ms(self) -> int | None:
        """The database server's clock (PostgreSQL), to anchor every replica (R-13)."""
        if not self.postgres:
            return None
        with self._read_engine.connect() as conn:
            value = conn.execute(
                text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            ).scalar()
        return int(value) if value is not None else None

    # -- reads -----------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._read_engine.connect() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return JobRecord.from_row(row) if row is not None else None

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        if not job_ids:
            return {}
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(jobs).where(jobs.c.id.in_(sorted(set(job_ids)))))
            return {r.id: r for r in map(JobRecord.from_row, rows)}

    def list_jobs(
        self,
        *,
        queue: str | None,
        state: JobState | None,
        wire_name: str | None,
        after_id: str | None,
        limit: int,
    ) -> list[JobRecord]:
        """Newest first (IDs are time-ordered), keyset-paged after ``after_id``; payload
        and output are left out of list views."""
        query = select(*_LIST_COLUMNS)
        conditions = []
        if queue is not None:
            conditions.append(jobs.c.queue == queue)
        if state is not None:
            conditions.append(jobs.c.state == state.value)
        if wire_name is not None:
            conditions.append(jobs.c.wire_name == wire_name)
        if after_id is not None:
            conditions.append(jobs.c.id < after_id)
        query = query.where(*conditions).order_by(jobs.c.id.desc()).limit(limit)
        with self._read_engine.connect() as conn:
            rows = conn.execute(query).all()
        return [JobRecord.from_mapping({**row._mapping, "payload": b"", "output": None}) for row in rows]

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        with self._read_engine.connect() as conn:
            rows = conn.execute(
                select(attempts)
                .where(attempts.c.job_id == job_id)
                .order_by(attempts.c.claimed_at_ms, attempts.c.id)
            )
            return [AttemptRecord.from_row(r) for r in rows]

    def list_transitions(self, job_id: str) -> list[dict[str, Any]]:
        with self._read_engine.connect() as conn:
            rows = conn.execute(
                select(transitions).where(transitions.c.job_id == job_id).order_by(transitions.c.seq)
            )
            return [dict(r._mapping) for r in rows]

    def next_due_ms(self, queues: Sequence[str], after_ms: int) -> int | None:
        """The earliest future run-at among scheduled jobs of ``queues``: when to wake."""
        with self._read_engine.connect() as conn:
            value = conn.execute(
                select(func.min(jobs.c.run_at_ms)).where(
                    jobs.c.queue.in_(list(queues)),
                    jobs.c.state == JobState.SCHEDULED.value,
                    jobs.c.run_at_ms > after_ms,
                )
            ).scalar()
        return int(value) if value is not None else None

    def count_by_state(self) -> dict[str, int]:
        with self._read_engine.connect() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            return {state: int(count) for state, count in rows}
