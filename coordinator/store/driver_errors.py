"""What a driver error means to the store: the one place that turns SQLAlchemy's
``DBAPIError`` (psycopg's and sqlite3's errors inside it) into ``StoreError``.

A try the database rolled back (deadlock, serialization failure) is a ``WriteConflict``;
a connection that failed before the commit is ``ConnectionLost``: ``Store.transact``
runs the body again on both. Anything else is a plain ``StoreError``, whose message
tells clients only that the database is unavailable; the log gets what the driver said,
cut to its first line.
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, OperationalError

from coordinator.store.errors import ConnectionLost, StoreError, WriteConflict

log = logging.getLogger(__name__)

CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25P03"})
"""PostgreSQL errors that end the session (admin shutdown, crash shutdown, cannot connect
now, idle-in-transaction timeout), besides class 08 (connection exception)."""
ROLLED_BACK_SQLSTATES = frozenset({"40001", "40P01"})
"""Serialization failure and deadlock: the server rolled the transaction back, so the
body may run again like after any write conflict."""
MAX_DETAIL_CHARS = 500
"""The longest driver message the log keeps (a first line can quote a whole statement)."""


def store_error(exc: DBAPIError, what: str, *, before_commit: bool) -> StoreError:
    """The client-facing error for a driver error, which is logged here at WARNING.

    Clients get a clean message (``StoreError``'s default): the driver's text names
    servers and ports. The log gets it, cut to its first line: PostgreSQL's DETAIL can
    quote a row's values, and statement parameters are hidden (``engine``).
    """
    log.warning("database error in %s: %s", what, driver_detail(exc))
    if sqlstate(exc) in ROLLED_BACK_SQLSTATES:
        return WriteConflict("the database rolled the transaction back (it conflicted with another)")
    if before_commit and connection_lost(exc):
        return ConnectionLost()
    return StoreError()


def sqlstate(exc: DBAPIError) -> str | None:
    """The PostgreSQL SQLSTATE of a psycopg error; None for a client-side one (the
    connection failed or closed) and for SQLite, which has none."""
    value = getattr(exc.orig, "sqlstate", None)
    return value if isinstance(value, str) else None


UNIQUE_VIOLATION = "23505"
"""PostgreSQL's SQLSTATE for an insert that hit a unique index or primary key."""
SQLITE_UNIQUE_ERRORS = frozenset({"SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})


def unique_violation(exc: DBAPIError) -> bool:
    """Whether ``exc`` is an insert that hit a unique key (a key or ID another write took),
    not another broken constraint (a NOT NULL, a CHECK, a foreign key): only the first is
    a race that a try again settles."""
    if sqlstate(exc) is not None:
        return sqlstate(exc) == UNIQUE_VIOLATION
    return getattr(exc.orig, "sqlite_errorname", None) in SQLITE_UNIQUE_ERRORS


def connection_lost(exc: DBAPIError) -> bool:
    """Whether the connection itself failed: SQLAlchemy saw a disconnect, psycopg failed
    on the client side (no SQLSTATE: a refused or broken connection), or the server ended
    the session."""
    if exc.connection_invalidated:
        return True
    state = sqlstate(exc)
    if state is None:
        return isinstance(exc, OperationalError) and hasattr(exc.orig, "sqlstate")
    return state.startswith("08") or state in CONNECTION_SQLSTATES


def driver_detail(exc: DBAPIError) -> str:
    """The driver's error for the log: its type, SQLSTATE and first line."""
    orig = exc.orig
    lines = str(orig).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > MAX_DETAIL_CHARS:
        first = first[:MAX_DETAIL_CHARS] + "…"
    state = sqlstate(exc)
    return f"{type(orig).__name__}{f' [{state}]' if state else ''}: {first}"


START_TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "08006"})
"""Server errors that end a session which had been made: admin shutdown (a terminated
backend), crash shutdown, cannot connect now (starting up, shutting down, in recovery),
connection failure."""
START_TRANSIENT_TEXTS = (
    "server closed the connection unexpectedly",
    "consuming input failed",
    "terminating connection",
    "the database system is",
    "connection to server was lost",
    "ssl connection has been closed unexpectedly",
)
"""What libpq says, with no SQLSTATE, when a connection it had made was lost, or the
server answered that it is starting up, shutting down or recovering. A refused
connection, an unknown database or role and a refused password are not here: psycopg
gives them no SQLSTATE either, so the text is what tells them apart."""


def transient_at_start(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a PostgreSQL connection that was made and
    then lost, or a server that is starting up, shutting down or recovering: a start-up
    may try again. SQLite's errors, a refused connection and anything input-like (a URL,
    a database, a role, a password, a schema that is not current) are not."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, DBAPIError):
            return _transient_driver_error(cause)
        cause = cause.__cause__ or cause.__context__
    return False


def worth_waiting_at_open(exc: DBAPIError) -> bool:
    """Whether opening the store should try ``exc`` again: a transient failure
    (``transient_at_start``) or a refused connection, which is what a PostgreSQL server
    restarting or recovering from a crash answers for seconds (a wrong port answers the
    same, so the wait ends with the error that names the URL). An unknown database or
    role or a refused password is not worth a wait."""
    if _transient_driver_error(exc):
        return True
    return (
        sqlstate(exc) is None
        and hasattr(exc.orig, "sqlstate")
        and "connection refused" in str(exc.orig).lower()
    )


def _transient_driver_error(exc: DBAPIError) -> bool:
    if not hasattr(exc.orig, "sqlstate"):  # sqlite3: a file, not a connection
        return False
    state = sqlstate(exc)
    if state is not None:
        return state in START_TRANSIENT_SQLSTATES
    said = str(exc.orig).lower()
    return any(text in said for text in START_TRANSIENT_TEXTS)
