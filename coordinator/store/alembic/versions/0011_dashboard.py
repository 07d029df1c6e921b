"""The dashboard's reads: jobs that ended per queue, terminal state and minute (written
by the queue count fold), an index for lists filtered by wire name, and the leased-jobs
index widened by the holder, so each worker's leases are counted from the index alone

Revision ID: 0011_dashboard
Revises: 0010_scheduled_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_dashboard"
down_revision = "0010_scheduled_index"
branch_labels = None
depends_on = None

_LEASED = "state IN ('reserved', 'running')"


def upgrade() -> None:
    op.create_table(
        "queue_finished",
        sa.Column("minute_ms", sa.BigInteger(), nullable=False),
        sa.Column("queue", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("minute_ms", "queue", "state"),
    )
    # On PostgreSQL building an index holds writes to jobs while it builds: the wire-name
    # index takes as long as the table is large; the leased one covers leased jobs only.
    op.create_index("ix_jobs_wire_name_id", "jobs", ["wire_name", "id"])
    op.drop_index("ix_jobs_leased", table_name="jobs")
    op.create_index(
        "ix_jobs_leased",
        "jobs",
        ["state", "worker_id"],
        sqlite_where=sa.text(_LEASED),
        postgresql_where=sa.text(_LEASED),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_leased", table_name="jobs")
    op.create_index(
        "ix_jobs_leased", "jobs", ["state"], sqlite_where=sa.text(_LEASED), postgresql_where=sa.text(_LEASED)
    )
    op.drop_index("ix_jobs_wire_name_id", table_name="jobs")
    op.drop_table("queue_finished")
