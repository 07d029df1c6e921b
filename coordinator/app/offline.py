"""What in-process commands need of the database without a running coordinator:
migrating it, and a scratch store for ``runwick bench`` to read its results from."""

from __future__ import annotations

from coordinator.store import Store
from coordinator.store.migrate import SchemaNotCurrent

__all__ = ["SchemaNotCurrent", "migrate_database", "open_scratch_store"]


def migrate_database(database_url: str) -> tuple[str | None, str | None]:
    """Creates or upgrades the schema to this coordinator's (idempotent); returns the
    schema revisions before (None: no schema yet) and after."""
    store = Store(database_url)
    try:
        return store.migrate()
    finally:
        store.close()


def open_scratch_store(database_url: str) -> Store:
    """Opens a database that may be thrown away, creating its schema on either engine."""
    return Store.open(database_url, create=True)
