"""The store over SQLite and PostgreSQL: one SQLAlchemy Core implementation.

``Store.transact(body)`` runs ``body(tx)`` in one write transaction (``store.tx.Tx``,
the named write operations), retrying it whole when a guarded write conflicted or the
connection failed before the commit; the read methods answer from a read connection.
Driver errors become ``StoreError`` here and nowhere else: clients are told the
database is unavailable, the log gets what the driver said. Dialect differences are
confined to row locking and notification (``tx``), the database clock (here) and
LISTEN (``notify``).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, OperationalError

from coordinator.domain.bounds import DEFAULT_BOUNDS, StoreBounds
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.graph import Neighbourhood
from coordinator.domain.rates import QueueRate
from coordinator.domain.records import (
    AttemptRecord,
    AuditEvent,
    FinishedMinute,
    JobRecord,
    LeaseHolder,
    QueueStats,
    Relatives,
    TokenRecord,
    Transition,
)
from coordinator.domain.schedules import ScheduleRecord
from coordinator.domain.search import JobSearch
from coordinator.domain.states import JobState
from coordinator.store import claim_rates, dashboard_sessions, planner, reads, waiting
from coordinator.store import graph as job_graph
from coordinator.store import migrate as migrations
from coordinator.store import schedules as schedule_reads
from coordinator.store import search as job_search
from coordinator.store.engine import (
    DEFAULT_TIMEOUTS,
    DatabaseTimeouts,
    create_read_engine,
    create_write_engine,
    is_sqlite,
    normalize_url,
)
from coordinator.store.errors import ConnectionLost, DuplicateKey, StoreError, WriteConflict
from coordinator.store.rate_cache import UnratedQueues
from coordinator.store.turn_memory import LastServed
from coordinator.store.tx import Tx
from coordinator.store.tx_queue_lifecycle import KNOWN_QUEUES_TTL_S

log = logging.getLogger(__name__)

T = TypeVar("T")

HISTORY_LIMIT = DEFAULT_BOUNDS.max_history_per_job
"""Transitions kept per job by default; older ones are dropped (docs/limits.md,
``StoreBounds.max_history_per_job``)."""
WRITE_TRIES = 3
"""How often ``transact`` runs a body whose try conflicted or lost its connection."""
KEPT_WRITERS = 4
"""Write connections kept open between transactions: one per writer thread of the
coordinator (``service.executors``: one on SQLite, four on PostgreSQL)."""
OPEN_WAIT_S = 30.0
"""How long opening the store waits for a database that refuses or drops connections."""
OPEN_FIRST_PAUSE_S = 0.25
OPEN_MAX_PAUSE_S = 4.0
"""The first and the longest pause between those tries (each pause doubles)."""
CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25P03"})
"""PostgreSQL errors that end the session (admin shutdown, crash shutdown, cannot connect
now, idle-in-transaction timeout), besides class 08 (connection exception)."""
ROLLED_BACK_SQLSTATES = frozenset({"40001", "40P01"})
"""Serialization failure and deadlock: the server rolled the transaction back, so the
body may run again like after any write conflict."""
_MAX_DETAIL_CHARS = 500


class Store:
    """Owns the engines; runs write transactions and answers reads."""

    def __init__(
        self, url: str, *, bounds: StoreBounds | None = None, timeouts: DatabaseTimeouts | None = None
    ) -> None:
        self.bounds = (bounds or DEFAULT_BOUNDS).validate()
        """The limits of docs/limits.md this store and the services over it apply."""
        self.timeouts = timeouts or DEFAULT_TIMEOUTS
        """How long a connection may hold a transaction open or wait (``engine``)."""
        self.url = normalize_url(url)
        self.postgres = not is_sqlite(self.url)
        self._write_engine = create_write_engine(self.url, self.timeouts)
        self._read_engine = create_read_engine(self.url, self.timeouts)
        self.on_transaction: Callable[[float], None] | None = None
        """Called with every write transaction's duration in seconds (for metrics)."""
        self.origin = uuid.uuid4().hex
        """Names this store's notifications (``Tx.notify_jobs_available``) to its own listener."""
        self._known_queues: set[str] = set()
        self._known_queues_at = time.monotonic()
        self._unrated_queues = UnratedQueues(self.bounds.max_queues)
        self._last_served = LastServed(self.bounds.max_queues)
        """Queues whose rows this store saw committed: enqueues skip looking them up."""
        self._analyzed_at: dict[str, int] = {}
        """The rows each table had when this store last refreshed its planner statistics."""
        self._idle_writers: list[Connection] = []
        """Write connections between two transactions, kept open (``_writer``)."""
        self._closed = False

    @classmethod
    def open(
        cls,
        url: str,
        *,
        create: bool | None = None,
        bounds: StoreBounds | None = None,
        timeouts: DatabaseTimeouts | None = None,
    ) -> Store:
        """Opens the store. SQLite is created and migrated on first open; PostgreSQL
        must have been migrated (``runwick migrate``) unless ``create`` is true."""
        store = cls(url, bounds=bounds, timeouts=timeouts)
        create = (not store.postgres) if create is None else create
        try:
            store._open_schema(create)
        except Exception:
            store.close()
            raise
        return store

    def _open_schema(self, create: bool) -> None:
        """Migrates or checks the schema. A connection lost or refused on the way (a
        backend terminated; a server restarting or still recovering, which refuses
        connections for seconds) is tried again after a growing pause, for up to
        ``OPEN_WAIT_S``: a coordinator started beside its database waits for it rather
        than crash. Anything else is raised as it was."""
        deadline = time.monotonic() + OPEN_WAIT_S
        pause_s = OPEN_FIRST_PAUSE_S
        for attempt in itertools.count(1):
            try:
                if create:
                    self.migrate()
                else:
                    migrations.require_current(self._write_engine)
                return
            except DBAPIError as exc:
                if not _connection_lost(exc) or time.monotonic() + pause_s > deadline:
                    raise
                log.warning(
                    "the database is not reachable opening the store (try %d: %s); trying again in %.2f s",
                    attempt,
                    _driver_detail(exc),
                    pause_s,
                )
                time.sleep(pause_s)
                pause_s = min(pause_s * 2, OPEN_MAX_PAUSE_S)

    def with_bounds(self, bounds: StoreBounds) -> Store:
        """This store (same engines) applying other bounds; close only the original."""
        view = copy.copy(self)
        view.bounds = bounds.validate()
        return view

    def migrate(
        self, *, lock_wait_ms: int = migrations.DEFAULT_LOCK_WAIT_MS
    ) -> tuple[str | None, str | None]:
        """Creates or upgrades the schema (``migrate.upgrade``); returns the revisions
        before and after (``None`` before: the database had no schema)."""
        before = migrations.current_revision(self._write_engine)
        migrations.upgrade(self._write_engine, lock_wait_ms=lock_wait_ms)
        return before, migrations.current_revision(self._write_engine)

    def close(self) -> None:
        """Closes the database connections (a transaction still running closes its own
        when it ends)."""
        self._closed = True
        while self._idle_writers:
            self._idle_writers.pop().close()
        self._write_engine.dispose()
        self._read_engine.dispose()

    # -- writes ----------------------------------------------------------------------

    def transact(self, body: Callable[[Tx], T], *, what: str = "write") -> T:
        """Runs ``body`` in one write transaction and returns what it returned.

        ``body`` runs again, whole, on a fresh transaction, up to ``WRITE_TRIES`` times in
        all, when the last try was rolled back without effect: a guarded write conflicted
        (a job changed between read and write), an idempotency key raced, or the
        connection failed before the commit (a disconnect, a terminated backend, a
        failed connect: ``ConnectionLost``). Bodies are written to be re-run. Then the
        last error is raised. A connection that fails during the commit itself is not
        retried: whether it committed is unknown, so it is a ``StoreError`` at once.
        """
        for attempt in range(1, WRITE_TRIES + 1):
            try:
                with self._transaction(what) as tx:
                    return body(tx)
            except (WriteConflict, DuplicateKey) as conflict:
                if attempt == WRITE_TRIES:
                    raise type(conflict)(f"{what}: {conflict}; try again") from conflict
                log.info("write conflict in %s (try %d); retrying", what, attempt)
            except ConnectionLost:
                if attempt == WRITE_TRIES:
                    raise
                log.info(
                    "lost the database connection in %s (try %d of %d); running it again on a new connection",
                    what,
                    attempt,
                    WRITE_TRIES,
                )
        raise AssertionError("unreachable")

    def write(self) -> contextlib.AbstractContextManager[Tx]:
        """One write transaction, without retries; commits when the block ends without
        an exception. Prefer ``transact``."""
        return self._transaction("write")

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[Tx]:
        started = time.perf_counter()
        committing = False
        conn: Connection | None = None
        try:
            conn = self._writer()
            with conn.begin():
                self._expire_known_queues()
                tx = Tx(
                    conn,
                    self.postgres,
                    self.bounds,
                    self._known_queues,
                    self.origin,
                    self._unrated_queues,
                    self._last_served,
                )
                yield tx
                tx.before_commit()
                committing = True  # the block is done; leaving ``begin`` commits
            self._known_queues.update(tx.registered_queues)  # committed: they exist
            self._known_queues.difference_update(tx.forgotten_queues)  # and these do not
            self._last_served.forget(tx.forgotten_queues)
            self._unrated_queues.learn(tx.rates_seen)
        except DBAPIError as exc:
            # The driver failed: the connection goes back to the pool (or, lost, is
            # dropped), and the next transaction, a retry too, starts on another.
            if conn is not None:
                conn.close()
                conn = None
            raise _store_error(exc, what, before_commit=not committing) from exc
        finally:
            if conn is not None:  # committed, or rolled back by ``begin`` and sound
                self._keep_writer(conn)
            if self.on_transaction is not None:
                self.on_transaction(time.perf_counter() - started)

    def _expire_known_queues(self) -> None:
        """Forgets the queue names seen once they are ``KNOWN_QUEUES_TTL_S`` old (another
        replica may have deleted some) or more than ``max_queues`` (a bounded memory)."""
        now = time.monotonic()
        if (
            now - self._known_queues_at > KNOWN_QUEUES_TTL_S
            or len(self._known_queues) > self.bounds.max_queues
        ):
            self._known_queues.clear()
            self._known_queues_at = now

    def _writer(self) -> Connection:
        """A write connection for one transaction: one kept from an earlier transaction,
        or a new one from the pool. A checkout and check-in per transaction (a new
        ``Connection``, the pool's queue, its reset on return) were an eighth of a job's
        instructions at a light load on SQLite, three transactions a job."""
        while self._idle_writers:
            try:
                conn = self._idle_writers.pop()  # atomic: another thread may take the last
            except IndexError:
                break
            if not (conn.closed or conn.invalidated):
                return conn
            conn.close()
        return self._write_engine.connect()

    def _keep_writer(self, conn: Connection) -> None:
        """Keeps ``conn`` for the next transaction, up to ``KEPT_WRITERS`` of them; the rest
        go back to the pool, which other users of the engine (migrations) draw on."""
        if self._closed or len(self._idle_writers) >= KEPT_WRITERS:
            conn.close()
        else:
            self._idle_writers.append(conn)

    # -- reads -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        try:
            with self._read_engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            raise _store_error(exc, "a read", before_commit=False) from exc

    def database_time_ms(self) -> int | None:
        """The database server's clock (PostgreSQL), to anchor every replica (R-13)."""
        if not self.postgres:
            return None
        with self._reading() as conn:
            value = conn.execute(
                text("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            ).scalar()
        return int(value) if value is not None else None

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._reading() as conn:
            return reads.get_job(conn, job_id)

    def rate_state(self, queue: str, now_ms: int) -> tuple[QueueRate | None, dict[str, int]]:
        """``queue``'s rate and what counts against it per key now (issue 41)."""
        with self._reading() as conn:
            return claim_rates.rate_state(conn, queue, now_ms)

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        with self._reading() as conn:
            return reads.get_jobs(conn, job_ids)

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
        with self._reading() as conn:
            return reads.list_jobs(
                conn, queue=queue, state=state, wire_name=wire_name, after_id=after_id, limit=limit
            )

    def in_flight_by_worker(self, worker_ids: Sequence[str]) -> dict[str, int]:
        """Jobs reserved or running per worker ID (workers holding none are left out)."""
        with self._reading() as conn:
            return reads.in_flight_by_worker(conn, worker_ids)

    def relatives(self, job_id: str) -> Relatives:
        """The job's parents and children (R-15)."""
        with self._reading() as conn:
            return reads.relatives(conn, job_id)

    def waiting_facts(self, job: JobRecord, now_ms: int) -> waiting.WaitingFacts:
        """``job``'s queue and its counts for ``domain.flow.waiting_reason`` (``store.waiting``)."""
        with self._reading() as conn:
            return waiting.waiting_facts(conn, job, now_ms)

    def get_attempt(self, attempt_id: str) -> AttemptRecord | None:
        with self._reading() as conn:
            return reads.get_attempt(conn, attempt_id)

    def list_attempts(self, job_id: str) -> list[AttemptRecord]:
        with self._reading() as conn:
            return reads.list_attempts(conn, job_id)

    def list_transitions(self, job_id: str) -> list[Transition]:
        with self._reading() as conn:
            return reads.list_transitions(conn, job_id)

    def refresh_planner_statistics(self) -> list[str]:
        """PostgreSQL: ANALYZE the job tables that outgrew the planner's estimate
        (``store.planner``); returns those it analyzed. A store analyzes a table again
        only once it doubled since its own last run, so a role that may not analyze (the
        server skips the table with a warning) does not ask at every call."""
        if not self.postgres:
            return []
        with self._reading() as conn:
            known = planner.known_rows(conn)
            estimated = planner.estimated_rows(conn, sorted(known))
        stale = sorted(
            table
            for table, rows in known.items()
            if planner.outgrown(rows, max(estimated[table], self._analyzed_at.get(table, 0)))
        )
        if not stale:
            return []
        try:
            with self._read_engine.connect() as conn:
                planner.analyze(conn.execution_options(isolation_level="AUTOCOMMIT"), stale)
        except DBAPIError as exc:
            raise _store_error(exc, "refreshing the planner statistics", before_commit=False) from exc
        for table in stale:
            self._analyzed_at[table] = known[table]
        log.info(
            "refreshed the planner statistics of %s (%s rows known, %s estimated)",
            ", ".join(stale),
            ", ".join(str(known[t]) for t in stale),
            ", ".join(str(estimated[t]) for t in stale),
        )
        return stale

    def queue_stats(
        self, now_ms: int, *, after_name: str | None = None, limit: int | None = None
    ) -> list[QueueStats]:
        """Known queues by name (at most ``limit`` after ``after_name``; every one when
        unset, which ``max_queues`` bounds), each with its controls, its jobs per state
        and its oldest due job (R-17), without a scan of the jobs."""
        with self._reading() as conn:
            return reads.queue_stats(conn, now_ms, after_name=after_name, limit=limit)

    def job_totals(self) -> tuple[int, dict[JobState, int]]:
        """How many queues are known, and the jobs of all of them per state."""
        with self._reading() as conn:
            return reads.job_totals(conn)

    def slot_demand(self, target: DemandTarget, now_ms: int, cap: int) -> SlotDemand:
        """``target``'s leased and due jobs, each counted up to ``cap`` (``reads``)."""
        with self._reading() as conn:
            return reads.slot_demand(conn, target, now_ms, cap)

    def finished_since(self, since_ms: int) -> list[FinishedMinute]:
        """Jobs that ended per minute, queue and terminal state, from the minute holding
        ``since_ms`` on (kept for a day; folded from the count deltas, not counted)."""
        with self._reading() as conn:
            return reads.finished_since(conn, since_ms)

    def lease_holders(self, limit: int) -> list[LeaseHolder]:
        """The workers holding reserved or running jobs now (any replica), most first."""
        with self._reading() as conn:
            return reads.lease_holders(conn, limit)

    def count_by_state(self) -> dict[str, int]:
        with self._reading() as conn:
            return reads.count_by_state(conn)

    def get_token(self, token_id: str) -> TokenRecord | None:
        with self._reading() as conn:
            return reads.get_token(conn, token_id)

    def revoked_tokens(self, token_ids: Sequence[str]) -> set[str]:
        """Those of ``token_ids`` that are revoked or do not exist (any more)."""
        with self._reading() as conn:
            return reads.revoked_tokens(conn, token_ids)

    def dashboard_session_token(self, id_sha256: str, now_ms: int) -> TokenRecord | None:
        """The unrevoked token of an unexpired dashboard session, else None."""
        with self._reading() as conn:
            return dashboard_sessions.session_token(conn, id_sha256, now_ms)

    def list_tokens(self, *, include_revoked: bool) -> list[TokenRecord]:
        with self._reading() as conn:
            return reads.list_tokens(conn, include_revoked=include_revoked)

    def list_audit_events(
        self, *, action: str | None, target: str | None, before_id: int | None, limit: int
    ) -> list[AuditEvent]:
        """Newest first, keyset-paged before ``before_id``."""
        with self._reading() as conn:
            return reads.list_audit_events(
                conn, action=action, target=target, before_id=before_id, limit=limit
            )

    # -- schedules (R-18) --------------------------------------------------------------

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        with self._reading() as conn:
            return schedule_reads.get_schedule(conn, name)

    def list_schedules(self, *, after_name: str | None, limit: int) -> list[ScheduleRecord]:
        """By name, keyset-paged after ``after_name``."""
        with self._reading() as conn:
            return schedule_reads.list_schedules(conn, after_name=after_name, limit=limit)

    def newest_skipped_ticks(self, names: Sequence[str], per_schedule: int) -> dict[str, list[int]]:
        """Per schedule, its newest ``per_schedule`` skipped ticks, newest first."""
        with self._reading() as conn:
            return schedule_reads.newest_skipped_ticks(conn, names, per_schedule)

    def due_schedule_names(self, now_ms: int, limit: int) -> list[str]:
        """Unpaused schedules whose next tick has come, the most overdue first."""
        with self._reading() as conn:
            return schedule_reads.due_schedule_names(conn, now_ms, limit)

    def search_jobs(self, search: JobSearch, **bounds: Any) -> job_search.SearchRows:
        """A page of a jobs search, bounded as ``store.search`` says."""
        with self._reading() as conn:
            return job_search.search_jobs(conn, search, **bounds)

    def neighbourhood(self, job_id: str, limit: int) -> Neighbourhood:
        """The job's parents and children with their states, ``limit`` each way."""
        with self._reading() as conn:
            return job_graph.neighbourhood(conn, job_id, limit)

    def count_for_bulk(self, **job_filter: Any) -> tuple[int, bool]:
        """How many jobs a bulk operation would select now (``store.search``)."""
        with self._reading() as conn:
            return job_search.count_for_bulk(conn, **job_filter)


def _store_error(exc: DBAPIError, what: str, *, before_commit: bool) -> StoreError:
    """The client-facing error for a driver error, which is logged here at WARNING.

    Clients get a clean message (``StoreError``'s default): the driver's text names
    servers and ports. The log gets it, cut to its first line: PostgreSQL's DETAIL can
    quote a row's values, and statement parameters are hidden (``engine``). A try the
    database rolled back (deadlock, serialization) is a ``WriteConflict``; a connection
    that failed before the commit is ``ConnectionLost``: ``transact`` retries both.
    """
    log.warning("database error in %s: %s", what, _driver_detail(exc))
    if _sqlstate(exc) in ROLLED_BACK_SQLSTATES:
        return WriteConflict("the database rolled the transaction back (it conflicted with another)")
    if before_commit and _connection_lost(exc):
        return ConnectionLost()
    return StoreError()


def _sqlstate(exc: DBAPIError) -> str | None:
    """The PostgreSQL SQLSTATE of a psycopg error; None for a client-side one (the
    connection failed or closed) and for SQLite, which has none."""
    value = getattr(exc.orig, "sqlstate", None)
    return value if isinstance(value, str) else None


def _connection_lost(exc: DBAPIError) -> bool:
    """Whether the connection itself failed: SQLAlchemy saw a disconnect, psycopg failed
    on the client side (no SQLSTATE: a refused or broken connection), or the server ended
    the session."""
    if exc.connection_invalidated:
        return True
    sqlstate = _sqlstate(exc)
    if sqlstate is None:
        return isinstance(exc, OperationalError) and hasattr(exc.orig, "sqlstate")
    return sqlstate.startswith("08") or sqlstate in CONNECTION_SQLSTATES


def _driver_detail(exc: DBAPIError) -> str:
    orig = exc.orig
    lines = str(orig).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > _MAX_DETAIL_CHARS:
        first = first[:_MAX_DETAIL_CHARS] + "…"
    sqlstate = _sqlstate(exc)
    return f"{type(orig).__name__}{f' [{sqlstate}]' if sqlstate else ''}: {first}"
