"""Queues and their controls (pause, concurrency limit), and the indexes that count jobs
per queue and state and find each queue's oldest due job (R-17)

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
    op.drop_table("queues")
