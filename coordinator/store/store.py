"""The store over SQLite and PostgreSQL: one SQLAlchemy Core implementation.

``Store.transact(body)`` runs ``body(tx)`` in one write transaction (``store.tx.Tx``,
the named write operations), retrying it whole when a guarded write conflicted or the
connection failed before the commit; the read methods (``store.store_reads``) answer
from a read connection. Driver errors become ``StoreError`` in ``store.driver_errors``
and nowhere else. Dialect differences are confined to row locking and notification
(``tx``), the database clock (``store_reads``) and LISTEN (``notify``).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from coordinator.domain.bounds import DEFAULT_BOUNDS, StoreBounds
from coordinator.store import migrate as migrations
from coordinator.store.driver_errors import driver_detail, store_error, worth_waiting_at_open
from coordinator.store.engine import (
    DEFAULT_TIMEOUTS,
    DatabaseTimeouts,
    create_read_engine,
    create_write_engine,
    is_sqlite,
    normalize_url,
)
from coordinator.store.errors import ConnectionLost, DuplicateKey, WriteConflict
from coordinator.store.rate_cache import UnratedQueues
from coordinator.store.store_reads import StoreReads
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


class Store(StoreReads):
    """Owns the engines; runs write transactions and answers reads (``StoreReads``)."""

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
        self._analyzed_at = {}
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
        wait_s: float = OPEN_WAIT_S,
    ) -> Store:
        """Opens the store. SQLite is created and migrated on first open; PostgreSQL
        must have been migrated (``runwick migrate``) unless ``create`` is true. A
        connection lost or refused is tried again for up to ``wait_s`` (0: not at all)."""
        store = cls(url, bounds=bounds, timeouts=timeouts)
        create = (not store.postgres) if create is None else create
        try:
            store._open_schema(create, wait_s)
        except Exception:
            store.close()
            raise
        return store

    def _open_schema(self, create: bool, wait_s: float) -> None:
        """Migrates or checks the schema. A connection lost or refused on the way (a
        backend terminated; a server restarting or still recovering, which refuses
        connections for seconds) is tried again after a growing pause, for up to
        ``wait_s``: a coordinator started beside its database waits for it rather
        than crash. Anything else is raised as it was."""
        deadline = time.monotonic() + wait_s
        pause_s = OPEN_FIRST_PAUSE_S
        for attempt in itertools.count(1):
            try:
                if create:
                    self.migrate()
                else:
                    migrations.require_current(self._write_engine)
                return
            except DBAPIError as exc:
                if not worth_waiting_at_open(exc) or time.monotonic() + pause_s > deadline:
                    raise
                log.warning(
                    "the database is not reachable opening the store (try %d: %s); trying again in %.2f s",
                    attempt,
                    driver_detail(exc),
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
            raise store_error(exc, what, before_commit=not committing) from exc
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
