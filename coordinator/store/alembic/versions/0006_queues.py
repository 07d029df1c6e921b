"""Queues and their controls (pause, concurrency limit), their job counts per state
(maintained), and the index that finds each queue's oldest due job (R-17)

Revision ID: 0006_queues
Revises: 0004_dependencies
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_queues"
down_revision = "0004_dependencies"
branch_labels = None
depends_on = None

_CLAIMABLE = "state IN ('available', 'scheduled')"


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("concurrency_limit", sa.Integer(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    # Queues that already hold jobs are known from the start.
    op.execute(
        "INSERT INTO queues (name, paused, created_at_ms, updated_at_ms) "
        "SELECT queue, false, min(created_at_ms), min(created_at_ms) FROM jobs GROUP BY queue"
    )
    op.create_table(
        "queue_counts",
        sa.Column("queue", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", "state"),
    )
    op.create_table(
        "queue_count_deltas",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("queue", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("delta", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.execute(
        "INSERT INTO queue_counts (queue, state, count) "
        "SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"
    )
    op.create_index("ix_jobs_queue_state", "jobs", ["queue", "state"])
    op.create_index(
        "ix_jobs_due",
        "jobs",
        ["queue", "run_at_ms"],
        sqlite_where=sa.text(_CLAIMABLE),
        postgresql_where=sa.text(_CLAIMABLE),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_due", table_name="jobs")
    op.drop_index("ix_jobs_queue_state", table_name="jobs")
    op.drop_table("queue_count_deltas")
    op.drop_table("queue_counts")
    op.drop_table("queues")
