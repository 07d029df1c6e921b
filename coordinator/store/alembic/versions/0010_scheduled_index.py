"""Due promotion walks an index of scheduled jobs by run-at time

Revision ID: 0010_scheduled_index
Revises: 0009_retention
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_scheduled_index"
down_revision = "0009_retention"
branch_labels = None
depends_on = None

_SCHEDULED = "state = 'scheduled'"


def upgrade() -> None:
    # Without it the due pass read every scheduled job (or every claimable one) each time
    # it ran, to find the few whose time has come. Partial, so available jobs, the deep
    # backlogs, are not in it. ``state`` leads although the predicate fixes it: SQLite's
    # planner, without statistics, then prefers it to ix_jobs_state_id.
    op.create_index(
        "ix_jobs_scheduled",
        "jobs",
        ["state", "run_at_ms"],
        unique=False,
        sqlite_where=sa.text(_SCHEDULED),
        postgresql_where=sa.text(_SCHEDULED),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_scheduled", table_name="jobs")
