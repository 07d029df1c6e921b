"""The store over SQLite and PostgreSQL.

``Store.write()`` opens one transaction and yields a ``WriteTx`` with the primitives the
service combines; every job update there is conditional on the state and attempt the
caller read (R-11). Dialect differences are confined to row locking (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL; SQLite has a single writer) and the database clock.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from coordinator.domain.bounds import DEFAULT_BOUNDS, StoreBounds
from coordinator.domain.states import CLAIMABLE_STATES, LEASED_STATES, JobState
from coordinator.store import migrate as migrations
from coordinator.store.engine import create_read_engine, create_write_engine, is_sqlite, normalize_url
from coordinator.store.records import AttemptRecord, JobRecord
from coordinator.store.schema import attempts, jobs, transitions

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "runwick_jobs_available"
"""The PostgreSQL channel that says claimable jobs appeared (SPEC §8)."""

HISTORY_LIMIT = DEFAULT_BOUNDS.max_history_per_job
"""Transitions kept per job by default; older ones are dropped (SPEC §5,
``StoreBounds.max_history_per_job``)."""
_IN_CHUNK = 1_000
"""Most values bound into one ``IN (...)``: both engines cap a statement's parameters."""

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


_FINISH_COLUMNS = (
    "finished_at_ms",
    "outcome",
    "error_code",
    "exception_type",
    "message",
    "detail",
    "retry_delay_ms",
    "job_state_after",
    "reported",
)
_FINISH_ATTEMPT = (
    update(attempts)
    .where(attempts.c.id == bindparam("g_id"), attempts.c.outcome.is_(None))
    .values({c: bindparam(f"v_{c}") for c in _FINISH_COLUMNS})
)
_MARK_STARTED = (
    update(attempts)
    .where(attempts.c.id == bindparam("g_id"))
    .values(execution_number=bindparam("v_execution_number"), started_at_ms=bindparam("v_started_at_ms"))
)


@functools.cache
def _job_update(columns: tuple[str, ...]) -> Any:
    """One prepared guarded UPDATE per set of columns, built once (statement building
    costs more than SQLite's execution of it)."""
    return (
        update(jobs)
        .where(
            jobs.c.id == bindparam("g_id"),
            jobs.c.state == bindparam("g_state"),
            jobs.c.history_seq == bindparam("g_seq"),
        )
        .values({c: bindparam(f"v_{c}") for c in (*columns, "history_seq", "updated_at_ms")})
    )


class WriteTx:
    """The primitives of one write transaction."""

    def __init__(self, conn: Connection, postgres: bool, bounds: StoreBounds = DEFAULT_BOUNDS) -> None:
        self.conn = conn
        self._postgres = postgres
        self.bounds = bounds

    # -- reads that lock -------------------------------------------------------------

    def _locked(self, query: Select[Any], skip_locked: bool = False) -> Select[Any]:
        if self._postgres:
            return query.with_for_update(skip_locked=skip_locked)
        return query

    def jobs_by_ids(self, ids: Iterable[str]) -> dict[str, JobRecord]:
        ids = sorted(set(ids))
        if not ids:
            return {}
        found: dict[str, JobRecord] = {}
        for chunk in _chunks(ids):
            # Locks in id order so concurrent batches on PostgreSQL cannot deadlock.
            query = self._locked(select(jobs).where(jobs.c.id.in_(chunk)).order_by(jobs.c.id))
            found.update((r.id, r) for r in map(JobRecord.from_row, self.conn.execute(query)))
        return found

    def attempts_by_ids(self, ids: Iterable[str]) -> dict[str, AttemptRecord]:
        ids = sorted(set(ids))
        if not ids:
            return {}
        found: dict[str, AttemptRecord] = {}
        for chunk in _chunks(ids):
            rows = self.conn.execute(select(attempts).where(attempts.c.id.in_(chunk)))
            found.update((r.id, r) for r in map(AttemptRecord.from_row, rows))
        return found

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
        """Writes the changes, each job guarded by the state and history sequence its
        first change was read with (R-11), and records one transition per change.

        Several changes to one job are folded into one UPDATE; updates that set the
        same columns go out as one executemany. Raises WriteConflict when any guard
        fails; the caller's transaction then rolls back whole.
        """
        if not changes:
            return
        folded: dict[str, tuple[JobRecord, dict[str, Any], list[JobChange]]] = {}
        for change in changes:
            entry = folded.setdefault(change.job.id, (change.job, {}, []))
            entry[1].update(change.values)
            entry[2].append(change)
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        history: list[dict[str, Any]] = []
        for first, values, job_changes in folded.values():
            seq, state = first.history_seq, first.state.value
            for change in job_changes:
                seq += 1
                to_state = str(change.values.get("state", state))
                history.append(
                    {
                        "job_id": first.id,
                        "seq": seq,
                        "at_ms": now_ms,
                        "from_state": state,
                        "to_state": to_state,
                        "attempt_id": change.attempt_id,
                        "reason": change.reason,
                    }
                )
                state = to_state
            row = {f"v_{key}": value for key, value in values.items()}
            row.update(v_history_seq=seq, v_updated_at_ms=now_ms, g_id=first.id)
            row.update(g_state=first.state.value, g_seq=first.history_seq)
            groups.setdefault(tuple(sorted(values)), []).append(row)
        for columns, rows in groups.items():
            self._execute_guarded(_job_update(columns), rows, "job changed under a write")
        self.conn.execute(insert(transitions), history)
        keep = self.bounds.max_history_per_job
        cuts = {h["job_id"]: h["seq"] - keep for h in history if h["seq"] > keep}
        if cuts:
            self.conn.execute(
                transitions.delete().where(
                    transitions.c.job_id == bindparam("job_id"), transitions.c.seq <= bindparam("cut")
                ),
                [{"job_id": job_id, "cut": cut} for job_id, cut in cuts.items()],
            )

    def _execute_guarded(self, statement: Any, rows: list[dict[str, Any]], what: str) -> None:
        """Runs a guarded UPDATE for many rows; every row must match exactly once."""
        if self.conn.dialect.supports_sane_multi_rowcount or len(rows) == 1:
            if self.conn.execute(statement, rows).rowcount != len(rows):
                raise WriteConflict(what)
            return
        for row in rows:
            if self.conn.execute(statement, row).rowcount != 1:
                raise WriteConflict(what)

    def insert_attempts(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            self.conn.execute(insert(attempts), list(rows))

    def finish_attempt(self, attempt_id: str, values: dict[str, Any]) -> None:
        """Records an attempt's end once: an attempt that already has an outcome is kept."""
        self.finish_attempts([{"id": attempt_id, **values}])

    def finish_attempts(self, rows: Sequence[dict[str, Any]]) -> None:
        """Records many attempts' ends (each row: ``id`` and the columns of _FINISH_COLUMNS);
        raises WriteConflict if any already has an outcome."""
        if rows:
            params = [{"g_id": row["id"], **{f"v_{c}": row.get(c) for c in _FINISH_COLUMNS}} for row in rows]
            self._execute_guarded(_FINISH_ATTEMPT, params, "attempt already has an outcome")

    def mark_started(self, attempt_id: str, execution_number: int, now_ms: int) -> None:
        self.mark_started_many([(attempt_id, execution_number)], now_ms)

    def mark_started_many(self, started: Sequence[tuple[str, int]], now_ms: int) -> None:
        if started:
            self.conn.execute(
                _MARK_STARTED,
                [{"g_id": a, "v_execution_number": n, "v_started_at_ms": now_ms} for a, n in started],
            )

    def renew_leases(self, attempt_ids: Sequence[str], lease_until_ms: int) -> dict[str, bool]:
        """R-10: extends the leases of the current attempts among ``attempt_ids``.

        One statement for the whole heartbeat. Returns the attempt IDs renewed, each with
        its job's cancel-requested flag (R-8: the heartbeat answer repeats the cancel, so
        it reaches a worker connected to another replica); the rest are lost to the worker.
        """
        renewed: dict[str, bool] = {}
        for chunk in _chunks(sorted(set(attempt_ids))):
            statement = (
                update(jobs)
                .where(
                    jobs.c.current_attempt_id.in_(chunk),
                    jobs.c.state.in_([s.value for s in LEASED_STATES]),
                )
                .values(lease_expires_at_ms=lease_until_ms)
                .returning(jobs.c.current_attempt_id, jobs.c.cancel_requested)
            )
            renewed.update((row[0], bool(row[1])) for row in self.conn.execute(statement))
        return renewed


def _chunks(values: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), _IN_CHUNK):
        yield values[start : start + _IN_CHUNK]


class Store:
    """Owns the engines; hands out write transactions and answers reads."""

    def __init__(self, url: str, *, bounds: StoreBounds | None = None) -> None:
        self.bounds = (bounds or DEFAULT_BOUNDS).validate()
        """The limits of SPEC §5 this store and the services over it apply."""
        self.url = normalize_url(url)
        self.postgres = not is_sqlite(self.url)
        self._write_engine = create_write_engine(self.url)
        self._read_engine = create_read_engine(self.url, self._write_engine)
        self.on_transaction: Callable[[float], None] | None = None
        """Called with every write transaction's duration in seconds (for metrics)."""

    @classmethod
    def open(cls, url: str, *, create: bool | None = None, bounds: StoreBounds | None = None) -> Store:
        """Opens the store. SQLite is created and migrated on first open; PostgreSQL
        must have been migrated (``runwick migrate``) unless ``create`` is true."""
        store = cls(url, bounds=bounds)
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

    def with_bounds(self, bounds: StoreBounds) -> Store:
        """This store (same engines) applying other bounds; close only the original."""
        view = copy.copy(self)
        view.bounds = bounds.validate()
        return view

    def migrate(self) -> None:
        migrations.upgrade(self._write_engine)

    def close(self) -> None:
        self._write_engine.dispose()
        if self._read_engine is not self._write_engine:
            self._read_engine.dispose()

    @contextlib.contextmanager
    def write(self) -> Iterator[WriteTx]:
        """One write transaction; commits when the block ends without an exception."""
        started = time.perf_counter()
        try:
            with self._write_engine.begin() as conn:
                yield WriteTx(conn, self.postgres, self.bounds)
        except (OperationalError, DBAPIError) as exc:
            raise StoreError(f"database error: {exc.orig}") from exc
        finally:
            if self.on_transaction is not None:
                self.on_transaction(time.perf_counter() - started)

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads kept outside this module (``store.access``)."""
        try:
            with self._read_engine.connect() as conn:
                yield conn
        except (OperationalError, DBAPIError) as exc:
            raise StoreError(f"database error: {exc.orig}") from exc

    def database_time_ms(self) -> int | None:
        """The database server's clock (PostgreSQL), to anchor every replica (R-13)."""
        if not self.postgres:
            return None
        with self.read() as conn:
            value = conn.execute(
                text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            ).scalar()
        return int(value) if value is not None else None

    # -- reads -----------------------------------------------------------------------

    def get_job(self, job_id: str) -> JobRecord | None:
        with self.read() as conn:
            row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return JobRecord.from_row(row) if row is not None else None

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        if not job_ids:
            return {}
        with self.read() as conn:
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
        with self.read() as conn:
            rows = conn.execute(query).all()
        return [JobRecord.from_mapping({**row._mapping, "payload": b"", "output": None}) for row in rows]

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        with self.read() as conn:
            row = conn.execute(select(attempts).where(attempts.c.id == attempt_id)).first()
        return AttemptRecord.from_row(row) if row is not None else None

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        with self.read() as conn:
            rows = conn.execute(
                select(attempts)
                .where(attempts.c.job_id == job_id)
                .order_by(attempts.c.claimed_at_ms, attempts.c.id)
            )
            return [AttemptRecord.from_row(r) for r in rows]

    def list_transitions(self, job_id: str) -> list[dict[str, Any]]:
        with self.read() as conn:
            rows = conn.execute(
                select(transitions).where(transitions.c.job_id == job_id).order_by(transitions.c.seq)
            )
            return [dict(r._mapping) for r in rows]

    def next_due_ms(self, queues: Sequence[str], after_ms: int) -> int | None:
        """The earliest future run-at among scheduled jobs of ``queues``: when to wake."""
        with self.read() as conn:
            value = conn.execute(
                select(func.min(jobs.c.run_at_ms)).where(
                    jobs.c.queue.in_(list(queues)),
                    jobs.c.state == JobState.SCHEDULED.value,
                    jobs.c.run_at_ms > after_ms,
                )
            ).scalar()
        return int(value) if value is not None else None

    def queue_depths(self) -> dict[tuple[str, str], int]:
        """Jobs per (queue, state) in the states that are not terminal: bounded by the
        backlog, never a count over finished jobs (SPEC §8)."""
        open_states = [state.value for state in JobState if not state.terminal]
        query = (
            select(jobs.c.queue, jobs.c.state, func.count())
            .where(jobs.c.state.in_(open_states))
            .group_by(jobs.c.queue, jobs.c.state)
        )
        with self.read() as conn:
            return {(queue, state): int(count) for queue, state, count in conn.execute(query)}

    def oldest_due_by_queue(self, now_ms: int) -> dict[str, int]:
        """Per queue, the earliest run-at among claimable jobs due by ``now_ms`` (the
        claim index answers it)."""
        query = (
            select(jobs.c.queue, func.min(jobs.c.run_at_ms))
            .where(jobs.c.state.in_([s.value for s in CLAIMABLE_STATES]), jobs.c.run_at_ms <= now_ms)
            .group_by(jobs.c.queue)
        )
        with self.read() as conn:
            return {queue: int(run_at) for queue, run_at in conn.execute(query)}

    def count_by_state(self) -> dict[str, int]:
        with self.read() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            return {state: int(count) for state, count in rows}
