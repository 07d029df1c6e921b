"""What every part of a write transaction shares: the connection, the engine kind, the
bounds, row locking (``FOR UPDATE [SKIP LOCKED]`` on PostgreSQL; SQLite has a single
writer, so it needs none), and the writes of many rows (held back and sent together on
PostgreSQL, ``store.pg_held``)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from sqlalchemy import Connection, Select, Table

from coordinator.domain.bounds import StoreBounds
from coordinator.store.errors import WriteConflict
from coordinator.store.pg_held import HeldWrites
from coordinator.store.prepared import DriverRows, Prepared
from coordinator.store.rate_cache import UnratedQueues
from coordinator.store.row_writes import RowUpdate, prepared_insert
from coordinator.store.turn_memory import LastServed

IN_CHUNK = 1_000
"""Most values bound into one ``IN (...)``: both engines cap a statement's parameters."""


def chunks(values: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), IN_CHUNK):
        yield values[start : start + IN_CHUNK]


class Lockable:
    """A read of the hot path prepared once (``store.prepared``), with its locking
    variant (``FOR UPDATE [SKIP LOCKED]``, for PostgreSQL) prepared once too: building
    a statement costs several times what SQLite takes to run it, and the hot path runs
    a few per job. ``TxBase._read_locked`` runs the variant the engine needs."""

    __slots__ = ("locked", "plain")

    def __init__(self, query: Select[Any], *, skip_locked: bool = False) -> None:
        self.plain = Prepared(query)
        self.locked = Prepared(query.with_for_update(skip_locked=skip_locked))


class TxBase:
    def __init__(
        self,
        conn: Connection,
        postgres: bool,
        bounds: StoreBounds,
        known_queues: AbstractSet[str] = frozenset(),
        origin: str = "",
        unrated_queues: UnratedQueues | None = None,
        last_served: LastServed | None = None,
    ) -> None:
        self._connection = conn
        self.last_served = last_served if last_served is not None else LastServed(bounds.max_queues)
        """Per queue, the key the store's claims served last: where fair turns start."""
        self._unrated_queues = unrated_queues
        """Queues the store lately saw without a rate (``store.rate_cache``)."""
        self.rates_seen: dict[str, bool] = {}
        """Queues whose controls this transaction read or set: whether each has a rate."""
        self._held = HeldWrites() if postgres else None
        """PostgreSQL: the writes not sent yet; they go out before anything else runs on
        the connection (``_conn``)."""
        self._postgres = postgres
        self.bounds = bounds
        self._known_queues = known_queues
        """Queues whose rows are committed (the store's set; a queue this store deletes
        leaves it, one another replica deletes is restored by the count fold)."""
        self.origin = origin
        """Who this transaction's notifications come from (``Store.origin``)."""
        self.registered_queues: set[str] = set()
        """Queues this transaction made sure exist: known to the store once it commits."""
        self.forgotten_queues: set[str] = set()
        """Queues this transaction deleted: unknown to the store once it commits."""
        self._counts: Counter[tuple[str, str]] = Counter()
        """Job count deltas per (queue, state), written once before the commit."""
        self._inserted_jobs: set[str] = set()
        self._inserted_with_parents: set[str] = set()
        """Jobs this transaction inserted, and those of them it gave parents: a job gets
        its parents only when it is inserted, so the others have none."""
        self._to_announce: set[str] = set()
        """Jobs this transaction made claimable and did not claim itself (PostgreSQL):
        other replicas are notified of them at the commit (``Tx.send_notification``)."""
        self._notify_anyway = False
        """Other replicas are notified at the commit, whatever was claimed."""
        self._failed_guard: WriteConflict | None = None
        """A guarded write that matched too few rows, outside a savepoint rolled back
        since: the transaction must not commit (``check_guards``), even if the error
        was caught."""

    @property
    def _conn(self) -> Connection:
        """The transaction's connection, for a statement to run on now: on PostgreSQL
        the held writes are sent first, so that whatever runs next sees them (every read
        of a transaction sees its every write, on both engines)."""
        self._send_held()
        return self._connection

    def send_writes(self) -> None:
        """Sends the writes held so far now (PostgreSQL; on SQLite every write is sent
        at its call): for a caller about to wait, so that their round trip overlaps the
        wait instead of following it (``service.batch``'s joined starts)."""
        self._send_held()

    def _send_held(self) -> None:
        """Sends the held writes now (PostgreSQL): before the commit, or so that an
        error of the last one held is raised here."""
        if self._held:
            try:
                self._held.send(self._connection)
            except WriteConflict as conflict:
                self._failed_guard = conflict
                raise

    def check_guards(self) -> None:
        """Raises the transaction's failed guard again, if any: called before the
        commit, so that no transaction commits past one (R-11)."""
        if self._failed_guard is not None:
            raise self._failed_guard

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """A part of the transaction that fails alone (an enqueue among a batch's items):
        when the block raises, its writes are rolled back to a savepoint, and so is what
        this transaction remembers of them (counts, queues made, jobs to announce, a
        failed guard); the rest of the transaction goes on. Held writes (PostgreSQL) are
        sent before the savepoint, so they stay the transaction's, and at the block's
        end, so that an error of the part's own writes is raised inside it."""
        self._send_held()
        remembered = self._remembered()
        nested = self._connection.begin_nested()
        try:
            yield
            self._send_held()
        except BaseException:
            if self._held is not None:
                self._held = HeldWrites()  # the part's writes never sent: gone with it
            nested.rollback()
            self._recall(remembered)
            raise
        nested.commit()

    def _remembered(self) -> tuple[Any, ...]:
        return (
            set(self.registered_queues),
            set(self.forgotten_queues),
            Counter(self._counts),
            set(self._inserted_jobs),
            set(self._inserted_with_parents),
            set(self._to_announce),
            self._notify_anyway,
            dict(self.rates_seen),
            self._failed_guard,
        )

    def _recall(self, remembered: tuple[Any, ...]) -> None:
        (
            self.registered_queues,
            self.forgotten_queues,
            self._counts,
            self._inserted_jobs,
            self._inserted_with_parents,
            self._to_announce,
            self._notify_anyway,
            self.rates_seen,
            self._failed_guard,
        ) = remembered

    def _locked(self, query: Select[Any], skip_locked: bool = False) -> Select[Any]:
        """``query`` with the lock this engine needs (``FOR UPDATE [SKIP LOCKED]`` on
        PostgreSQL); a prebuilt read is a ``Lockable`` instead (``_read_locked``)."""
        if self._postgres:
            return query.with_for_update(skip_locked=skip_locked)
        return query

    def _read_locked(self, query: Lockable, params: Mapping[str, Any]) -> DriverRows:
        """Runs a prebuilt read with the lock this engine needs (see ``_locked``)."""
        return (query.locked if self._postgres else query.plain).execute(self._conn, params)

    def _insert_rows(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        """Inserts ``rows`` (each with the same columns): held on PostgreSQL (sent with
        the next statement, ``store.pg_held``), the driver's ``executemany`` on SQLite."""
        if not rows:
            return
        if self._held is not None:
            self._held.insert(table, rows)
        else:
            prepared_insert(table).executemany(self._connection, rows)

    def _update_rows(
        self, row_update: RowUpdate, rows: Sequence[Mapping[str, Any]], *, conflict: str | None = None
    ) -> None:
        """Runs ``row_update`` for every row (held on PostgreSQL, see ``_insert_rows``).
        With ``conflict``, every row must match, or the write raises
        ``WriteConflict(conflict)``: at once on SQLite, when the held writes go out on
        PostgreSQL (before the commit either way, so the transaction rolls back whole)."""
        if not rows:
            return
        if self._held is not None:
            if self._held.holds_any(row_update, rows):
                self._send_held()  # one statement's parts do not see each other's rows
            self._held.update(row_update, rows, conflict)
            return
        prepared = row_update.prepared
        if self._connection.dialect.supports_sane_multi_rowcount or len(rows) == 1:
            matched = prepared.executemany(self._connection, rows)
        else:
            matched = sum(prepared.executemany(self._connection, [row]) for row in rows)
        if conflict is not None and matched != len(rows):
            self._failed_guard = WriteConflict(conflict)
            raise self._failed_guard
