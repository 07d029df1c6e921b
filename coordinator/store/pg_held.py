"""PostgreSQL: a transaction's writes held back and sent together, as one statement.

At a light load a job's three transactions made about 27 round trips to PostgreSQL, and
most were writes nothing in between reads: an update of the job, its transition, its
attempt, the queue's count deltas, the notification. Each round trip is a wake-up of the
server and of the writer thread. So a transaction's writes are held until something else
must run on its connection (any read, a write whose error must be told apart, the
commit; ``TxBase._conn``) and then go out together, each a data-modifying ``WITH`` part
of one statement::

    WITH w0 AS (UPDATE jobs SET ... WHERE jobs.id = ... RETURNING 1),
         w1 AS (INSERT INTO transitions (...) SELECT * FROM unnest(...) AS v(...))
    SELECT (SELECT count(*) FROM w0)

Worth its code (benchmarks/LOG.md, 2026-12-07): sent one by one, the same writes cost
an enqueue 4 statements instead of 1, a start 5 instead of 2, a result 6 instead of 3,
and the coordinator 8-22% more CPU a job in each of 7 alternating pairs of ``runwick
bench --engine postgres`` (load 4-17; throughput 0.70-1.06 of holding, lower in 6).

One statement is one Sync: unlike psycopg's pipeline mode (``store.pg_cursor``), it
leaves ``idle_in_transaction_session_timeout`` armed between any two statements.

What holding changes, and why it is safe:

- Every read sees every write of its transaction: the held writes go out before it.
- The parts of one statement run on one snapshot and do not see each other's changes.
  An update of a row that a held write already inserts or changes sends the held writes
  first (``HeldWrites.holds_any``). Foreign keys are checked when the whole statement
  has run, so an attempt may go with its job's update.
- A guarded update's row count is checked when the writes go out, not at the call: a
  failed guard raises ``WriteConflict`` naming the update (its conflict, the rows it
  matched of those it must, its place among the held updates, its table), at the latest
  just before the commit. The transaction never commits past it: ``TxBase`` keeps the
  error and raises it again before the commit (``check_guards``) even if a caller caught
  it, unless a savepoint around the write rolled back. Sending a guarded update at once
  instead costs a claim and a start a round trip more and a result two (4, 3 and 5
  statements instead of 3, 2 and 3; throughput 0.70-0.96 of holding and 4-19% more
  coordinator CPU a job in all 7 pairs) to tell the caller what no caller uses: every
  one lets the transaction roll back whole and run again.
- An error of a held write (a lost connection, a constraint) surfaces at the statement
  that sends it. A write whose error the caller tells apart (a taken idempotency key)
  sends at once (``TxBase._send_held``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table

from coordinator.store import pg_arrays
from coordinator.store.errors import WriteConflict
from coordinator.store.prepared import run_sql
from coordinator.store.row_writes import RowUpdate

_Part = tuple[Any, ...]
"""One held write's shape: ("insert", table, columns) of arrays, ("insert rows", table,
columns, row count) of plain values (fewer than ``pg_arrays.MIN_ROWS`` rows),
("arrays", row_update) or ("rows", row_update, row count); with the notification, a
statement's shape."""


class HeldWrites:
    """The writes of one transaction not sent yet (see above)."""

    __slots__ = ("_checks", "_inserting", "_notify", "_params", "_parts", "_written")

    def __init__(self) -> None:
        self._parts: list[_Part] = []
        self._params: dict[str, Any] = {}
        self._checks: list[tuple[int, str | None, str]] = []
        """Per held update, in order: the rows it must change, the conflict's text (None:
        its count is not checked), and the table it updates."""
        self._written: set[tuple[str, str, Any]] = set()
        """(table, column, value) of every row a held write inserts or changes: the first
        primary key column of an inserted row, the first key column of an updated one."""
        self._inserting: set[str] = set()
        """The tables the held inserts write."""
        self._notify: tuple[str, str] | None = None

    def __bool__(self) -> bool:
        return bool(self._parts) or self._notify is not None

    def insert(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        """Holds the insert of ``rows`` (each with the same columns)."""
        index, columns = len(self._parts), tuple(rows[0])
        if len(rows) < pg_arrays.MIN_ROWS:
            # A value a column: an array a column costs its encoding in Python (a few us
            # each, 52 for an enqueue's claimed job) where a value costs almost none.
            self._params.update(_row_values(index, rows, columns))
            self._parts.append(("insert rows", table, columns, len(rows)))
        else:
            self._params.update(pg_arrays.arrays(f"w{index}_", table, [(c, c) for c in columns], rows))
            self._parts.append(("insert", table, columns))
        self._inserting.add(table.name)
        key = _first_primary_key(table)
        if key in columns:  # else the database numbers the rows: no later update names them
            self._written.update((table.name, key, row[key]) for row in rows)

    def holds_any(self, row_update: RowUpdate, rows: Sequence[Mapping[str, Any]]) -> bool:
        """Whether a held write already inserts or changes one of ``rows`` (found by
        their first key): then the held writes must go out before this update, which
        would not see them. An update found by another column than the table's first
        primary key column cannot be matched with inserted rows: any held insert into its
        table goes out first."""
        if not self._written:
            return False
        table = row_update.table
        param, column = row_update.keys[0]
        if column != _first_primary_key(table) and table.name in self._inserting:
            return True
        return any((table.name, column, row[param]) in self._written for row in rows)

    def update(self, row_update: RowUpdate, rows: Sequence[Mapping[str, Any]], conflict: str | None) -> None:
        """Holds ``row_update`` of ``rows``; with ``conflict``, sending it raises
        ``WriteConflict`` unless every row matched. The caller has made sure no held
        write changes the same rows (``holds_any``)."""
        index = len(self._parts)
        table, (param, column) = row_update.table.name, row_update.keys[0]
        self._written.update((table, column, row[param]) for row in rows)
        pairs = (*row_update.keys, *row_update.values)
        if len(rows) >= pg_arrays.MIN_ROWS:
            self._params.update(pg_arrays.arrays(f"w{index}_", row_update.table, pairs, rows))
            self._parts.append(("arrays", row_update))
        else:
            self._params.update(_row_values(index, rows, [param for param, _ in pairs]))
            self._parts.append(("rows", row_update, len(rows)))
        self._checks.append((len(rows), conflict, table))

    def notify(self, channel: str, payload: str) -> None:
        """Sends ``pg_notify(channel, payload)`` with the held writes."""
        self._notify = (channel, payload)

    def send(self, conn: Connection) -> None:
        """Sends every held write (and the notification) as one statement, and checks the
        guarded updates' row counts: a failed one raises ``WriteConflict`` naming it."""
        parts, params, checks, notify = self._parts, self._params, self._checks, self._notify
        self._parts, self._params, self._checks, self._notify = [], {}, [], None
        self._written, self._inserting = set(), set()
        if notify is not None:
            params["notify_channel"], params["notify_payload"] = notify
        (counts,) = run_sql(conn, _statement(tuple(parts), notify is not None), params)
        for number, (count, (expected, conflict, table)) in enumerate(zip(counts, checks, strict=False)):
            if conflict is not None and count != expected:
                raise WriteConflict(
                    f"{conflict}: {count} of {expected} rows matched by held update {number + 1} of "
                    f"{len(checks)} (of {table}; {len(parts)} writes sent together)"
                )


def _row_values(index: int, rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """The parameters of part ``index``'s rows sent as plain values: one per row and
    name, ``w<index>_<row number>_<name>`` (``pg_arrays.insert_rows_sql`` and
    ``row_update_sql`` name them so)."""
    return {f"w{index}_{number}_{name}": row[name] for number, row in enumerate(rows) for name in names}


@functools.cache
def _first_primary_key(table: Table) -> str:
    return next(iter(table.primary_key.columns)).name


@functools.lru_cache(maxsize=256)
def _statement(parts: tuple[_Part, ...], notify: bool) -> str:
    """The SQL of held writes of these shapes: a ``WITH`` part per write (per row for an
    update of a few rows), and one row of each update's count, then the notification.
    Shapes are few (one per kind of transaction), so each is built once."""
    ctes: list[str] = []
    columns: list[str] = []
    for index, part in enumerate(parts):
        name = f"w{index}"
        if part[0] == "insert":
            ctes.append(f"{name} AS ({pg_arrays.insert_sql(part[1], part[2], name + '_')})")
        elif part[0] == "insert rows":
            ctes.append(f"{name} AS ({pg_arrays.insert_rows_sql(part[1], part[2], part[3], name + '_')})")
        elif part[0] == "arrays":
            ctes.append(f"{name} AS ({pg_arrays.update_sql(part[1], name + '_')})")
            columns.append(f"(SELECT count(*) FROM {name})")
        else:
            names = [f"{name}_{number}" for number in range(part[2])]
            ctes += [f"{row} AS ({pg_arrays.row_update_sql(part[1], row + '_')})" for row in names]
            columns.append(" + ".join(f"(SELECT count(*) FROM {row})" for row in names))
    if notify:
        columns.append("pg_notify(CAST(%(notify_channel)s AS TEXT), CAST(%(notify_payload)s AS TEXT))")
    head = f"WITH {', '.join(ctes)} " if ctes else ""
    return f"{head}SELECT {', '.join(columns) or '0'}"
