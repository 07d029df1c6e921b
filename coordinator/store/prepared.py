"""The hot path's statements, compiled once per engine and run on the driver's cursor.

SQLAlchemy's ``Connection.execute`` costs 60-100 us of Python per statement before the
driver sees it (an execution context, parameter processing, a result object), and
again per row of an ``executemany``. SQLite runs one of these statements in about 10 us,
and at a light load a job goes through about thirty of them, so that layer was most of
the coordinator's CPU per job. A ``Prepared`` statement is still built with SQLAlchemy
Core and compiled by it, once per engine (and per list length for ``IN`` lists); each
execution then only orders the parameters and hands the SQL to the driver's cursor.

What SQLAlchemy's execution would do besides is kept: ``before_cursor_execute``
listeners hear every statement (tests count and interrupt statements through them), a
driver error is raised as SQLAlchemy's ``DBAPIError`` with the connection invalidated
when it is lost (``Connection._handle_dbapi_exception``, the same call
``Connection.execute`` makes), and every parameter goes through its type's bind
processor. Results are the driver's tuples, named by ``DriverRows.keys()``.

Statements whose SQL depends on a parameter's value (literal execution) are refused at
compile time; they go through ``Connection.execute``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import ClauseElement, Connection, Insert, Select, TextualSelect
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler

Getter = Callable[[Mapping[str, Any]], Any]


class DriverRows:
    """The rows of one execution: the driver's tuples, and the columns' names."""

    __slots__ = ("_keys", "rows")

    def __init__(self, keys: tuple[str, ...], rows: list[Any]) -> None:
        self._keys = keys
        self.rows = rows

    def keys(self) -> tuple[str, ...]:
        return self._keys

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def scalars(self) -> Iterator[Any]:
        """The first column of every row."""
        return (row[0] for row in self.rows)


_MAX_SHAPES = 64
"""Renderings kept per statement and engine: one per ``IN`` list length seen, so a
bound keeps a long-running coordinator's memory flat (a rendering dropped is made
again, as SQLAlchemy's execution made it every time)."""


class _Piece:
    """Where one driver parameter, or an expanded ``IN`` list's run of them, comes from."""

    __slots__ = ("get", "spread")

    def __init__(self, get: Getter, *, spread: bool = False) -> None:
        self.get = get
        self.spread = spread
        """``get`` returns every value of an expanded list, in order."""


class _Shape:
    """One rendering of a statement: its SQL and how a parameter set becomes the
    driver's (a tuple for positional styles, a dict for named ones)."""

    __slots__ = ("direct", "names", "pieces", "sql")

    def __init__(
        self,
        sql: str,
        names: tuple[str, ...] | None,
        pieces: tuple[_Piece, ...],
        direct: Getter | None = None,
    ) -> None:
        self.sql = sql
        self.names = names
        """The driver's parameter names in order (named styles), or None (positional)."""
        self.pieces = pieces
        self.direct = direct
        """Where every driver parameter is the caller's of the same name, untouched: the
        whole conversion in one call (a row of a batch goes through it per column)."""

    def bind(self, params: Mapping[str, Any]) -> Any:
        if self.direct is not None:
            return self.direct(params)
        values: list[Any] = []
        for piece in self.pieces:
            if piece.spread:
                values.extend(piece.get(params))
            else:
                values.append(piece.get(params))
        if self.names is None:
            return tuple(values)
        return dict(zip(self.names, values, strict=True))


def _direct(names: tuple[str, ...], positional: bool) -> Getter:
    """``_Shape.direct`` for parameters taken as they are: a tuple of them in order
    (positional styles), or the caller's mapping itself (named ones)."""
    if not positional:
        return lambda params: params
    if len(names) == 1:
        name = names[0]
        return lambda params: (params[name],)
    return operator.itemgetter(*names)


def _getter(source: str, processor: Callable[[Any], Any] | None) -> Getter:
    """Reads the caller's parameter ``source`` through its type's processor."""
    if processor is None:
        return lambda params: params[source]
    return lambda params: processor(params[source])


def _spread(source: str, processor: Callable[[Any], Any] | None) -> Getter:
    """Reads every value of the caller's list ``source`` (an ``IN`` list)."""
    if processor is None:
        return lambda params: params[source]
    return lambda params: [processor(value) for value in params[source]]


def _constant(value: Any) -> Getter:
    return lambda params: value


class _Compiled:
    """A statement compiled for one dialect, with a shape per ``IN`` list length."""

    def __init__(self, statement: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=list(column_keys or ()) or None)
        assert isinstance(compiled, SQLCompiler)
        if compiled.literal_execute_params:
            raise ValueError("a statement rendered per parameter value cannot be prepared")
        self.compiled = compiled
        self.defaulted = {column.key for column in (*compiled.insert_prefetch, *compiled.update_prefetch)}
        """Columns whose values SQLAlchemy computes per row when the caller gives none."""
        self.expanding = tuple(sorted(bind.key for bind in compiled.post_compile_params if bind.expanding))
        self.shapes: dict[tuple[int, ...], _Shape] = {}
        # Whether rows come back, and their columns, known here: so the cursor's description
        # (psycopg builds it anew on every read of it: thirty objects for a job row) is never
        # asked for. A TextualSelect is ``text(...).columns(...)``: SQL written out, columns named.
        self.keys: tuple[str, ...] = ()
        if isinstance(statement, Select | TextualSelect):
            self.keys = tuple(statement.selected_columns.keys())
            self.returns_rows = True
        else:
            self.returns_rows = bool(compiled.effective_returning)

    def shape(self, params: Mapping[str, Any]) -> _Shape:
        lengths = tuple(len(params[name]) for name in self.expanding)
        found = self.shapes.get(lengths)
        if found is None:
            if len(self.shapes) >= _MAX_SHAPES:
                self.shapes.clear()
            found = self.shapes[lengths] = self._render(params)
        return found

    def _render(self, params: Mapping[str, Any]) -> _Shape:
        state = self.compiled.construct_expanded_state(dict(params))
        origin: dict[str, tuple[str, int]] = {}
        for expanding, expanded in state.parameter_expansion.items():
            for position, name in enumerate(expanded):
                origin[name] = (expanding, position)
        names = tuple(state.positiontup) if state.positiontup is not None else tuple(state.parameters)
        pieces: list[_Piece] = []
        untouched = True
        for name in names:
            processor = state.processors.get(name)
            if name in origin:
                source, position = origin[name]
                untouched = False
                if position == 0:
                    pieces.append(_Piece(_spread(source, processor), spread=True))
                elif not (pieces and pieces[-1].spread):
                    # SQLAlchemy renders an expanded list's values side by side.
                    raise ValueError(f"the values of {source!r} are not rendered together")
                continue
            if name in params:
                pieces.append(_Piece(_getter(name, processor)))
                untouched = untouched and processor is None
                continue
            untouched = False
            bind = self.compiled.binds.get(name)
            if bind is None or bind.required or bind.callable is not None or name in self.defaulted:
                # A value SQLAlchemy would compute itself (a column default): not prepared.
                raise ValueError(f"parameter {name!r} is not among the statement's")
            # A constant of the statement itself (``.values(satisfied=True)``).
            pieces.append(_Piece(_constant(processor(bind.value) if processor is not None else bind.value)))
        positional = state.positiontup is not None
        direct = _direct(names, positional) if untouched and names else None
        return _Shape(state.statement, None if positional else names, tuple(pieces), direct)


class Prepared:
    """A statement compiled once per engine, run on the driver's cursor (see above).

    INSERTs are compiled for the columns of the rows they are given (every row of one
    call names the same columns)."""

    __slots__ = ("_by_dialect", "statement")

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement
        self._by_dialect: dict[tuple[str, tuple[str, ...]], _Compiled] = {}

    def _compiled(self, conn: Connection, params: Mapping[str, Any]) -> _Compiled:
        columns = tuple(params) if isinstance(self.statement, Insert) else ()
        key = (conn.dialect.name, columns)
        found = self._by_dialect.get(key)
        if found is None:
            found = self._by_dialect[key] = _Compiled(self.statement, conn.dialect, columns)
        return found

    def execute(self, conn: Connection, params: Mapping[str, Any] | None = None) -> DriverRows:
        """Runs the statement once; the rows it returned (none for a write)."""
        params = params or {}
        compiled = self._compiled(conn, params)
        shape = compiled.shape(params)
        cursor = _run(conn, shape.sql, shape.bind(params), many=False)
        try:
            rows = cursor.fetchall() if compiled.returns_rows else []
        finally:
            cursor.close()
        return DriverRows(compiled.keys, rows)

    def executemany(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> int:
        """Runs the statement once per parameter set; returns the rows they changed, in
        all (``dialect.supports_sane_multi_rowcount`` says whether the driver counts)."""
        if not rows:
            return 0
        shape = self._compiled(conn, rows[0]).shape(rows[0])
        if len(rows) == 1:
            # One execution: no executemany (a loop on PostgreSQL, ``store.pg_cursor``) for it.
            cursor = _run(conn, shape.sql, shape.bind(rows[0]), many=False)
        else:
            cursor = _run(conn, shape.sql, [shape.bind(row) for row in rows], many=True)
        try:
            return int(cursor.rowcount)
        finally:
            cursor.close()


def run_sql(conn: Connection, sql: str, params: Mapping[str, Any]) -> list[Any]:
    """Runs ``sql``, already written in the driver's parameter style, once, as a
    ``Prepared`` statement runs (listeners first, driver errors wrapped); its rows."""
    cursor = _run(conn, sql, params, many=False)
    try:
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _run(conn: Connection, sql: str, parameters: Any, *, many: bool) -> Any:
    """Hands ``sql`` to a new cursor of the connection's driver connection, as
    ``Connection.execute`` would: listeners first, driver errors wrapped."""
    cursor = conn.connection.cursor()
    try:
        for listener in conn.dispatch.before_cursor_execute:
            sql, parameters = listener(conn, cursor, sql, parameters, None, many)
        if many:
            cursor.executemany(sql, parameters)
        else:
            cursor.execute(sql, parameters)
    except conn.dialect.loaded_dbapi.Error as error:
        cursor.close()
        # Wraps the error and invalidates a lost connection, exactly as execute() does.
        conn._handle_dbapi_exception(error, sql, parameters, cursor, None)
    return cursor
