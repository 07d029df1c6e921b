"""Jobs that ended per queue, terminal state and minute, for the dashboard's throughput
chart (written by the queue count fold)

Revision ID: 0010_queue_finished
Revises: 0009_retention
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_queue_finished"
down_revision = "0009_retention"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_finished",
        sa.Column("minute_ms", sa.BigInteger(), nullable=False),
        sa.Column("queue", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("minute_ms", "queue", "state"),
    )


def downgrade() -> None:
    op.drop_table("queue_finished")
