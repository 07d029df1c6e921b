"""Unique jobs: an optional key per wire name that holds while a job with it has not
ended (enqueue returns that job instead of a second one)

Revision ID: 0007_unique_jobs
Revises: 0006_queues
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_unique_jobs"
down_revision = "0006_queues"
branch_labels = None
depends_on = None

_UNFINISHED = "unique_key IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("unique_key", sa.String(length=256), nullable=True))
    op.create_index(
        "ux_jobs_unique_key",
        "jobs",
        ["wire_name", "unique_key"],
        unique=True,
        sqlite_where=sa.text(_UNFINISHED),
        postgresql_where=sa.text(_UNFINISHED),
    )


def downgrade() -> None:
    op.drop_index("ux_jobs_unique_key", table_name="jobs")
    op.drop_column("jobs", "unique_key")
