"""Queues may have a rate limit (issue 41), with its grants per key and slot

Revision ID: 0024_queue_rates
Revises: 0023_concurrency_keys
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_queue_rates"
down_revision = "0023_concurrency_keys"
branch_labels = None
depends_on = None


def _identifier(length: int) -> sa.String:
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")


def upgrade() -> None:
    # Nullable, or with a constant default: existing queues have no rate, and adding the
    # columns rewrites no rows on either engine.
    op.add_column("queues", sa.Column("rate_count", sa.Integer(), nullable=True))
    op.add_column("queues", sa.Column("rate_period_ms", sa.BigInteger(), nullable=True))
    op.add_column(
        "queues", sa.Column("rate_per_key", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.create_table(
        "queue_rate_slots",
        sa.Column("queue", _identifier(256), primary_key=True),
        sa.Column("key", _identifier(256), primary_key=True),
        sa.Column("slot_ms", sa.BigInteger(), primary_key=True),
        sa.Column("granted", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queue_rate_slots")
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("rate_per_key")
        batch.drop_column("rate_period_ms")
        batch.drop_column("rate_count")
