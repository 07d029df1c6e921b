"""Recurring schedules (R-18) and the ticks they skipped

Revision ID: 0008_schedules
Revises: 0007_unique_jobs
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_schedules"
down_revision = "0007_unique_jobs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("cron", sa.String(length=256), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("wire_name", sa.String(length=256), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("queue", sa.String(length=256), nullable=False),
        sa.Column("catch_up", sa.String(length=16), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("next_tick_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_tick_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_job_id", sa.String(length=36), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_index("ix_schedules_next_tick", "schedules", ["next_tick_ms"], unique=False)
    op.create_table(
        "schedule_skipped_ticks",
        sa.Column("schedule_name", sa.String(length=256), nullable=False),
        sa.Column("tick_ms", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["schedule_name"], ["schedules.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("schedule_name", "tick_ms"),
    )


def downgrade() -> None:
    op.drop_table("schedule_skipped_ticks")
    op.drop_index("ix_schedules_next_tick", table_name="schedules")
    op.drop_table("schedules")
