"""Alembic environment: runs on the engine the coordinator passes in. On PostgreSQL the
migration holds a transaction-scoped advisory lock, so replicas or init containers that
migrate at once run one after the other (the later ones find the schema current)."""

from __future__ import annotations

import logging

from alembic import context
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from coordinator.store.migrate import MIGRATION_LOCK_KEY, MigrationLocked
from coordinator.store.schema import metadata

LOCK_NOT_AVAILABLE = "55P03"
log = logging.getLogger("coordinator.store.migrate")


def lock_migrations(connection: Connection, wait_ms: int) -> None:
    """Takes the migration lock, waiting at most ``wait_ms`` (0: forever), then puts the
    session's own ``lock_timeout`` back for the DDL, which must not queue long behind
    running transactions (a waiting ALTER TABLE blocks every reader behind it)."""
    got = connection.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    if got.scalar_one():
        return
    limit = f"{wait_ms / 1000:g} s" if wait_ms else "no limit"
    log.info("another migration holds the schema lock: waiting for it (%s)", limit)
    own = connection.execute(text("SELECT current_setting('lock_timeout')")).scalar_one()
    connection.execute(text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": str(wait_ms)})
    try:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
            raise MigrationLocked(
                f"another migration held the schema lock for over {wait_ms / 1000:g} s; "
                "run `runwick migrate` again once it has finished"
            ) from None
        raise
    connection.execute(text("SELECT set_config('lock_timeout', :value, true)"), {"value": own})


engine = context.config.attributes["engine"]
with engine.begin() as connection:
    if connection.dialect.name == "postgresql":
        lock_migrations(connection, context.config.attributes.get("lock_wait_ms", 0))
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    before = context.get_context().get_current_revision()  # read under the lock
    context.run_migrations()
    after = context.get_context().get_current_revision()
    if after != before:
        log.info("database schema migrated from %s to %s", before or "none", after)
