"""What in-process commands need of the database without a running coordinator:
migrating it, and a scratch store for ``runwick bench`` to read its results from."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from coordinator.store import DatabaseTimeouts, Store, UnsupportedDatabase
from coordinator.store.migrate import DEFAULT_LOCK_WAIT_MS, MigrationLocked, SchemaNotCurrent

__all__ = [
    "MigrationLocked",
    "SchemaNotCurrent",
    "database_failure",
    "migrate_database",
    "open_scratch_store",
]

_MAX_DRIVER_LINE = 300

MIGRATION_TIMEOUTS = DatabaseTimeouts(pg_statement_timeout_ms=0)
"""A migration may build an index on a large table: no statement timeout. Its DDL keeps
the short lock timeout, so it never queues long in front of the coordinators' writes."""


def migrate_database(
    database_url: str, *, lock_timeout_s: float | None = None
) -> tuple[str | None, str | None]:
    """Creates or upgrades the schema to this coordinator's (idempotent) and returns the
    schema revisions before (None: no schema yet) and after. On PostgreSQL it waits up
    to ``lock_timeout_s`` (0: no limit) while another migration runs, then raises
    MigrationLocked."""
    wait_ms = DEFAULT_LOCK_WAIT_MS if lock_timeout_s is None else round(lock_timeout_s * 1000)
    store = Store(database_url, timeouts=MIGRATION_TIMEOUTS)
    try:
        return store.migrate(lock_wait_ms=wait_ms)
    finally:
        store.close()


def open_scratch_store(database_url: str) -> Store:
    """Opens a database that may be thrown away, creating its schema on either engine."""
    return Store.open(database_url, create=True)


def database_failure(exc: BaseException) -> str | None:
    """What the database said, in one line for an operator (the driver's own first line,
    no traceback), or None when ``exc`` is not the database's: a URL that does not parse
    or names another database, a server that refuses or does not answer, a database or a
    file that does not exist."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, UnsupportedDatabase):
            return str(cause)
        if isinstance(cause, DBAPIError):
            said = (str(cause.orig).strip().splitlines() or [type(cause.orig).__name__])[0]
            return said.removeprefix("connection failed: ")[:_MAX_DRIVER_LINE]
        cause = cause.__cause__ or cause.__context__
    return None
