"""PostgreSQL: a batch's rows in one statement, sent as one array per column and unpacked
by ``unnest``, instead of one execution per row.

``executemany`` is one execution per row: the server parses, plans and runs each, and
the driver handles each one's result in Python (about 20 us a row on the coordinator's
side alone), each its own round trip (``store.pg_cursor`` says why). A worker batch
writes several rows per job (its update, its transition, its attempt), so that was most
of a PostgreSQL batch's time. One statement per table does the same writes; an update's
row count still tells whether every row's guard held (``row_writes.RowUpdate``). SQLite
keeps ``executemany``, which its driver runs in C.

Statements are built once per table and column set, with every column's type cast from
the schema, so the arrays' element types never depend on what Python values hold.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, text
from sqlalchemy.dialects import postgresql

from coordinator.store.prepared import Prepared
from coordinator.store.row_writes import RowUpdate

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]

MIN_ROWS = 8
"""Updates of fewer rows go through ``executemany`` instead: a statement over ``unnest``
costs the server a join that a plain update by primary key does not, which for the one
or two rows of a batch at light load was more than the executions it saves
(PostgreSQL's CPU per job at 100 jobs/s rose from 3.7 to 4.1-4.8 ms with arrays for
every batch). Inserts join nothing: two rows or more go as arrays (``MIN_INSERT_ROWS``),
one round trip where ``executemany`` now takes one per row (``store.pg_cursor``)."""
MIN_INSERT_ROWS = 2


def insert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Inserts ``rows`` (each with the same columns) in one statement."""
    if rows:
        columns = tuple(rows[0])
        _insert_statement(table, columns).executemany(conn, [_arrays(columns, rows)])


def update(conn: Connection, row_update: RowUpdate, rows: Sequence[Mapping[str, Any]]) -> int:
    """Runs ``row_update`` for every entry of ``rows`` in one statement; returns how many
    rows matched."""
    if not rows:
        return 0
    names = [param for param, _ in (*row_update.keys, *row_update.values)]
    return _update_statement(row_update).executemany(conn, [_arrays(names, rows)])


def _arrays(names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    return {name: [row[name] for row in rows] for name in names}


def _unnest(table: Table, params: Sequence[tuple[str, str]]) -> str:
    """``unnest(CAST(:p AS <column type>[]), ...) AS v(p, ...)`` for (param, column) pairs."""
    arrays = ", ".join(
        f"CAST(:{param} AS {table.c[column].type.compile(dialect=_DIALECT)}[])" for param, column in params
    )
    return f"unnest({arrays}) AS v({', '.join(param for param, _ in params)})"


@functools.cache
def _insert_statement(table: Table, columns: tuple[str, ...]) -> Prepared:
    source = _unnest(table, [(column, column) for column in columns])
    return Prepared(text(f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT * FROM {source}"))


@functools.cache
def _update_statement(row_update: RowUpdate) -> Prepared:
    table = row_update.table
    assignments = ", ".join(f"{column} = v.{param}" for param, column in row_update.values)
    matches = [f"{table.name}.{column} = v.{param}" for param, column in row_update.keys]
    if row_update.condition:
        matches.append(row_update.condition)
    source = _unnest(table, [*row_update.keys, *row_update.values])
    where = " AND ".join(matches)
    return Prepared(text(f"UPDATE {table.name} SET {assignments} FROM {source} WHERE {where}"))
