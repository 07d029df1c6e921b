"""Finished jobs indexed by finish time in one partial index per terminal state, which
retention's purge uses on SQLite too

Revision ID: 0013_finished_indexes
Revises: 0012_leased_queue_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_finished_indexes"
down_revision = "0012_leased_queue_index"
branch_labels = None
depends_on = None

_TERMINAL_STATES = ("succeeded", "failed", "cancelled")
_TERMINAL = "state IN ('succeeded', 'failed', 'cancelled')"


def upgrade() -> None:
    # SQLite never used ix_jobs_finished for retention's purge of one state, which it
    # cannot prove implies the IN list: it walked ix_jobs_state_id and sorted every job
    # in the state, each pass. One index per state, its predicate stated by the purge
    # word for word, serves both engines. Building them reads the finished jobs; on
    # PostgreSQL writes to jobs wait for the build.
    op.drop_index("ix_jobs_finished", table_name="jobs")
    for state in _TERMINAL_STATES:
        predicate = sa.text(f"state = '{state}'")
        op.create_index(
            f"ix_jobs_{state}_at",
            "jobs",
            ["state", "finished_at_ms", "id"],
            sqlite_where=predicate,
            postgresql_where=predicate,
        )


def downgrade() -> None:
    for state in _TERMINAL_STATES:
        op.drop_index(f"ix_jobs_{state}_at", table_name="jobs")
    op.create_index(
        "ix_jobs_finished",
        "jobs",
        ["state", "finished_at_ms"],
        sqlite_where=sa.text(_TERMINAL),
        postgresql_where=sa.text(_TERMINAL),
    )
