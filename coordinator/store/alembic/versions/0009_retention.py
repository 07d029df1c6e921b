"""Retention (R-19): an index for the purge query, terminal jobs by state and finish time

Revision ID: 0009_retention
Revises: 0008_schedules
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_retention"
down_revision = "0008_schedules"
branch_labels = None
depends_on = None

_TERMINAL = "state IN ('succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    # Partial: the rows of open jobs, the hot ones, are not in it. On PostgreSQL building
    # it holds writes to jobs for as long as the build takes on a large table.
    op.create_index(
        "ix_jobs_finished",
        "jobs",
        ["state", "finished_at_ms"],
        unique=False,
        sqlite_where=sa.text(_TERMINAL),
        postgresql_where=sa.text(_TERMINAL),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_finished", table_name="jobs")
