"""PostgreSQL: a batch's rows in one statement, sent as one array per column and unpacked
by ``unnest``, instead of one execution per row.

psycopg's ``executemany`` pipelines one execution per row: the server parses, plans and
runs each, and the driver handles each one's result in Python (about 20 us a row on
the coordinator's side alone). A worker batch writes several rows per job (its update,
its transition, its attempt), so that was most of a PostgreSQL batch's time. One
statement per table does the same writes; an update's row count still tells whether
every row's guard held (``Tx._execute_guarded``'s rule). SQLite keeps ``executemany``,
which its driver runs in C.

Statements are built once per table and column set, with every column's type cast from
the schema, so the arrays' element types never depend on what Python values hold.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, TextClause, text
from sqlalchemy.dialects import postgresql

_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]

MIN_ROWS = 8
"""Fewer rows go through ``executemany`` instead: a statement over ``unnest`` costs the
server a join that a plain update by primary key does not, which for the one or two rows
of a batch at light load was more than the executions it saves (PostgreSQL's CPU per job
at 100 jobs/s rose from 3.7 to 4.1-4.8 ms with arrays for every batch)."""


def insert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Inserts ``rows`` (each with the same columns) in one statement."""
    if rows:
        columns = tuple(rows[0])
        conn.execute(_insert_statement(table, columns), _arrays(columns, rows))


def update(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    keys: Mapping[str, str],
    values: Mapping[str, str],
    condition: str = "",
) -> int:
    """Updates one row per entry of ``rows`` in one statement; returns how many matched.

    ``keys`` and ``values`` map each parameter of a row to its column: a row is the one
    whose key columns equal its key parameters (and that meets ``condition``, SQL on the
    table's columns), and gets its value parameters. Rows must name distinct targets."""
    if not rows:
        return 0
    statement = _update_statement(table, tuple(keys.items()), tuple(values.items()), condition)
    return conn.execute(statement, _arrays((*keys, *values), rows)).rowcount


def _arrays(names: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    return {name: [row[name] for row in rows] for name in names}


def _unnest(table: Table, params: Sequence[tuple[str, str]]) -> str:
    """``unnest(CAST(:p AS <column type>[]), ...) AS v(p, ...)`` for (param, column) pairs."""
    arrays = ", ".join(
        f"CAST(:{param} AS {table.c[column].type.compile(dialect=_DIALECT)}[])" for param, column in params
    )
    return f"unnest({arrays}) AS v({', '.join(param for param, _ in params)})"


@functools.cache
def _insert_statement(table: Table, columns: tuple[str, ...]) -> TextClause:
    source = _unnest(table, [(column, column) for column in columns])
    return text(f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT * FROM {source}")


@functools.cache
def _update_statement(
    table: Table, keys: tuple[tuple[str, str], ...], values: tuple[tuple[str, str], ...], condition: str
) -> TextClause:
    assignments = ", ".join(f"{column} = v.{param}" for param, column in values)
    matches = [f"{table.name}.{column} = v.{param}" for param, column in keys]
    if condition:
        matches.append(condition)
    source = _unnest(table, [*keys, *values])
    return text(f"UPDATE {table.name} SET {assignments} FROM {source} WHERE {' AND '.join(matches)}")
