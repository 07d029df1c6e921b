"""Writes a batch makes for many rows at once, described once for both ways of sending
them: the driver's ``executemany`` (SQLite, and PostgreSQL for a few rows) and one
statement of arrays (``pg_arrays``, PostgreSQL for many; ``TxBase`` chooses)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Table,
    TextClause,
    Update,
    bindparam,
    insert,
    text,
    update,
)

from coordinator.store.prepared import Prepared


@dataclass(frozen=True)
class RowUpdate:
    """An UPDATE of one row per parameter set, found by key.

    ``keys`` and ``values`` pair each parameter of a row with its column: a row is the one
    whose key columns equal its key parameters and that meets ``condition`` (SQL on the
    table's columns, or empty); it gets its value parameters. The rows of one execution
    must name distinct targets; how many matched tells whether every guard held."""

    table: Table
    keys: tuple[tuple[str, str], ...]
    values: tuple[tuple[str, str], ...]
    condition: str = ""

    @functools.cached_property
    def statement(self) -> Update:
        """The prepared statement ``executemany`` runs once per row."""
        conditions: list[ColumnElement[bool] | TextClause] = [
            self.table.c[column] == bindparam(param) for param, column in self.keys
        ]
        if self.condition:
            conditions.append(text(self.condition))
        assignments: dict[str, BindParameter[Any]] = {
            column: bindparam(param) for param, column in self.values
        }
        return update(self.table).where(*conditions).values(assignments)

    @functools.cached_property
    def prepared(self) -> Prepared:
        """``statement``, run on the driver's cursor (``store.prepared``)."""
        return Prepared(self.statement)


@functools.cache
def prepared_insert(table: Table) -> Prepared:
    """The INSERT of every row's columns, prepared once per table (``store.prepared``
    compiles it for the columns each call's rows name). Inline: no caller wants the
    keys the database generates, which SQLAlchemy would otherwise ask PostgreSQL to
    send back for every row (``RETURNING id`` on each count delta and audit event)."""
    return Prepared(insert(table).inline())
