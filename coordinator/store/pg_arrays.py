"""PostgreSQL: the SQL of a write of many rows as one statement, its rows sent as one
array per column and unpacked by ``unnest``, instead of one execution per row.

One execution per row would make the server parse, plan and run each, and the driver
handle each one's result in Python (about 20 us a row on the coordinator's side alone),
each its own round trip (``store.pg_cursor`` says why). A worker batch writes several
rows per job (its update, its transition, its attempt), so that was most of a
PostgreSQL batch's time. One statement per table does the same writes; an update's row
count still tells whether every row's guard held (``row_writes.RowUpdate``). SQLite
keeps ``executemany``, which its driver runs in C.

Every column's type is cast from the schema, so the parameters' types never depend on
what Python values hold. Each builder takes a ``prefix`` for its parameter names, so that
several writes can share one statement (``store.pg_held``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import String, Table
from sqlalchemy.dialects import postgresql
from sqlalchemy.types import TypeEngine

from coordinator.store import pg_binary_arrays
from coordinator.store.row_writes import RowUpdate

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]

MIN_ROWS = 8
"""Updates of fewer rows go as one plain update by primary key per row instead
(``row_update_sql``): a statement over ``unnest`` costs the server a join that a plain
update does not, which for the one or two rows of a batch at light load was more than
the executions it saves (PostgreSQL's CPU per job at 100 jobs/s rose from 3.7 to 4.1-4.8
ms with arrays for every batch). Inserts of fewer rows go as ``VALUES`` of one parameter
a column (``insert_rows_sql``): an array costs its encoding in Python, a few us a column
(``pg_binary_arrays``), where the driver dumps a plain value in C."""


def arrays(
    prefix: str, table: Table, params: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The parameters of ``insert_sql``/``update_sql``: for each (parameter, column) pair,
    the parameter's values in row order as an array of the column's type
    (``pg_binary_arrays``)."""
    return {
        f"{prefix}{param}": pg_binary_arrays.typed(_column_type(table, column), [row[param] for row in rows])
        for param, column in params
    }


@functools.cache
def _column_type(table: Table, column: str) -> TypeEngine[Any]:
    return table.c[column].type.dialect_impl(_DIALECT)


def insert_sql(table: Table, columns: Sequence[str], prefix: str) -> str:
    """``INSERT`` of rows given as one array per column (parameters ``<prefix><column>``)."""
    source = _unnest(table, [(column, column) for column in columns], prefix)
    return f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT * FROM {source}"


def insert_rows_sql(table: Table, columns: Sequence[str], count: int, prefix: str) -> str:
    """``INSERT`` of ``count`` rows given as one parameter per column and row
    (``<prefix><row number>_<column>``)."""
    rows = ", ".join(
        "(" + ", ".join(_cast(table, column, f"{prefix}{number}_{column}") for column in columns) + ")"
        for number in range(count)
    )
    return f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES {rows}"


def update_sql(row_update: RowUpdate, prefix: str) -> str:
    """``row_update`` for rows given as one array per parameter, ``RETURNING 1`` per row
    it changed."""
    table = row_update.table
    assignments = ", ".join(f"{column} = v.{param}" for param, column in row_update.values)
    matches = [f"{table.name}.{column} = v.{param}" for param, column in row_update.keys]
    if row_update.condition:
        matches.append(row_update.condition)
    source = _unnest(table, [*row_update.keys, *row_update.values], prefix)
    where = " AND ".join(matches)
    return f"UPDATE {table.name} SET {assignments} FROM {source} WHERE {where} RETURNING 1"


def row_update_sql(row_update: RowUpdate, prefix: str) -> str:
    """``row_update`` for one row (parameters ``<prefix><param>``), ``RETURNING 1`` if it
    changed it."""
    table = row_update.table
    values = [f"{column} = {_cast(table, column, prefix + p)}" for p, column in row_update.values]
    matches = [f"{table.name}.{column} = {_cast(table, column, prefix + p)}" for p, column in row_update.keys]
    if row_update.condition:
        matches.append(row_update.condition)
    return f"UPDATE {table.name} SET {', '.join(values)} WHERE {' AND '.join(matches)} RETURNING 1"


def _type(table: Table, column: str) -> str:
    """The column's type as a cast names it: a collation (``schema._identifier``) is no part of
    a type in a cast, and the column's own applies to the comparison anyway."""
    column_type = _column_type(table, column)
    if isinstance(column_type, String) and column_type.collation is not None:
        column_type = String(column_type.length)
    return str(column_type.compile(dialect=_DIALECT))


def _cast(table: Table, column: str, param: str) -> str:
    return f"CAST(%({param})s AS {_type(table, column)})"


def _unnest(table: Table, params: Sequence[tuple[str, str]], prefix: str) -> str:
    """``unnest(CAST(%(<prefix>p)b AS <column type>[]), ...) AS v(p, ...)`` for (param,
    column) pairs: the driver's own placeholders (``store.pg_held`` runs the SQL as it is).

    ``%b``: each array goes in the binary format (``pg_binary_arrays`` encodes it). psycopg
    dumps a list as text element by element in Python, quoting each string after a
    regular expression's search (1.3 us a string, 0.4 an integer); the server then parses
    it (``array_in`` was 5% of its time under load). In binary it reads the array as it
    is."""
    unpacked = ", ".join(f"CAST(%({prefix}{param})b AS {_type(table, column)}[])" for param, column in params)
    return f"unnest({unpacked}) AS v({', '.join(param for param, _ in params)})"
