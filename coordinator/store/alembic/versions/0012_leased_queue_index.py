"""Each queue's reserved and running jobs from a partial index of leased jobs, not an
index of every job's queue and state

Revision ID: 0012_leased_queue_index
Revises: 0011_dashboard
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_leased_queue_index"
down_revision = "0011_dashboard"
branch_labels = None
depends_on = None

_LEASED = "state IN ('reserved', 'running')"


def upgrade() -> None:
    # ix_jobs_queue_state held every job, so each state change of each job rewrote its
    # entry (and on PostgreSQL, where a state change is never a HOT update, added one).
    # Its one reader counts a concurrency-limited queue's leased jobs: a partial index
    # of leased jobs, as few as the workers run, serves it. Building it on PostgreSQL
    # holds writes to jobs while it reads the leased jobs only.
    op.drop_index("ix_jobs_queue_state", table_name="jobs")
    op.create_index(
        "ix_jobs_queue_leased",
        "jobs",
        ["queue", "state"],
        sqlite_where=sa.text(_LEASED),
        postgresql_where=sa.text(_LEASED),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_queue_leased", table_name="jobs")
    op.create_index("ix_jobs_queue_state", "jobs", ["queue", "state"])
