"""The outbox table in your own Alembic migrations::

    from worker_sdk.outbox.alembic import create_outbox_table, drop_outbox_table

    def upgrade() -> None:
        create_outbox_table()

    def downgrade() -> None:
        drop_outbox_table()

The same columns and index as ``outbox_table()``, on SQLite, PostgreSQL and the other
databases SQLAlchemy speaks; works in Alembic's offline (``--sql``) mode too.
"""

from __future__ import annotations

from alembic import op

from worker_sdk.outbox._rows import DEFAULT_TABLE_NAME
from worker_sdk.outbox._table import PENDING_INDEX_COLUMNS, outbox_columns, pending_index_name


def create_outbox_table(name: str = DEFAULT_TABLE_NAME, *, schema: str | None = None) -> None:
    """Creates the outbox table ``name`` and its index (inside a migration)."""
    op.create_table(name, *outbox_columns(), schema=schema)
    op.create_index(pending_index_name(name), name, list(PENDING_INDEX_COLUMNS), schema=schema)


def drop_outbox_table(name: str = DEFAULT_TABLE_NAME, *, schema: str | None = None) -> None:
    """Drops the outbox table ``name`` and its index (a downgrade)."""
    op.drop_index(pending_index_name(name), table_name=name, schema=schema)
    op.drop_table(name, schema=schema)
