"""What in-process commands need of the database without a running coordinator:
migrating it, and a scratch store for ``runwick bench`` to read its results from."""

from __future__ import annotations

from coordinator.store import DatabaseTimeouts, Store
from coordinator.store.migrate import DEFAULT_LOCK_WAIT_MS, MigrationLocked, SchemaNotCurrent

__all__ = ["MigrationLocked", "SchemaNotCurrent", "migrate_database", "open_scratch_store"]

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
