"""What every part of a write transaction shares: the connection, the engine kind, the
bounds, and row locking (``FOR UPDATE [SKIP LOCKED]`` on PostgreSQL; SQLite has a single
writer, so it needs none)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from sqlalchemy import Connection, Select, Table

from coordinator.domain.bounds import StoreBounds
from coordinator.store import pg_arrays
from coordinator.store.prepared import DriverRows, Prepared
from coordinator.store.row_writes import RowUpdate, prepared_insert

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
    ) -> None:
        self._conn = conn
        self._postgres = postgres
        self.bounds = bounds
        self._known_queues = known_queues
        """Queues whose rows are committed (the store's set, which only grows)."""
        self.origin = origin
        """Who this transaction's notifications come from (``Store.origin``)."""
        self.registered_queues: set[str] = set()
        """Queues this transaction made sure exist: known to the store once it commits."""
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
        """Inserts ``rows``: one statement of arrays on PostgreSQL when they are many
        (``pg_arrays``), the driver's ``executemany`` otherwise."""
        if not rows:
            return
        if self._postgres and len(rows) >= pg_arrays.MIN_INSERT_ROWS:
            pg_arrays.insert(self._conn, table, rows)
        else:
            prepared_insert(table).executemany(self._conn, rows)

    def _update_rows(self, row_update: RowUpdate, rows: Sequence[Mapping[str, Any]]) -> int:
        """Runs ``row_update`` for every row; returns how many rows matched: one statement
        of arrays on PostgreSQL when the rows are many, else the driver runs the prepared
        statement per row and reports the total."""
        if not rows:
            return 0
        if self._postgres and len(rows) >= pg_arrays.MIN_ROWS:
            return pg_arrays.update(self._conn, row_update, rows)
        prepared = row_update.prepared
        if self._conn.dialect.supports_sane_multi_rowcount or len(rows) == 1:
            return prepared.executemany(self._conn, rows)
        return sum(prepared.executemany(self._conn, [row]) for row in rows)
