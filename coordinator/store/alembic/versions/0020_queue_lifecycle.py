"""Queues are listed in natural order (cq2 before cq10), paged by a sort key

Revision ID: 0020_queue_lifecycle
Revises: 0019_audit_truncate
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator.domain.naming import MAX_NATURAL_KEY_CHARS, natural_key

revision = "0020_queue_lifecycle"
down_revision = "0019_audit_truncate"
branch_labels = None
depends_on = None


def _key_type() -> sa.String:
    return sa.String(MAX_NATURAL_KEY_CHARS).with_variant(
        sa.String(MAX_NATURAL_KEY_CHARS, collation="C"), "postgresql"
    )


def upgrade() -> None:
    # The key is the name with each number written as its length and digits
    # (``domain.naming``), so ordering by it is ordering naturally, by a plain index.
    # Queues are few (at most max_queues), so filling it row by row here is quick.
    op.add_column("queues", sa.Column("sort_key", _key_type(), nullable=False, server_default=""))
    queues = sa.table("queues", sa.column("name", sa.String), sa.column("sort_key", sa.String))
    bind = op.get_bind()
    names = [row[0] for row in bind.execute(sa.select(queues.c.name))]
    for name in names:
        bind.execute(queues.update().where(queues.c.name == name).values(sort_key=natural_key(name)))
    op.create_index("ix_queues_sort_key", "queues", ["sort_key", "name"])


def downgrade() -> None:
    op.drop_index("ix_queues_sort_key", table_name="queues")
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("sort_key")
