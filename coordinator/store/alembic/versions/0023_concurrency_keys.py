"""Jobs carry a concurrency key; queues may limit each key's reserved and running jobs

Revision ID: 0023_concurrency_keys
Revises: 0022_job_trace_context
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_concurrency_keys"
down_revision = "0022_job_trace_context"
branch_labels = None
depends_on = None

_LEASED = "state IN ('reserved', 'running')"
_CLAIMABLE = "state IN ('available', 'scheduled')"


def upgrade() -> None:
    # A constant default: PostgreSQL (11+) and SQLite add the column without rewriting
    # the table; existing jobs share the implicit key ''.
    key_type = sa.String(256).with_variant(sa.String(256, collation="C"), "postgresql")
    op.add_column("jobs", sa.Column("concurrency_key", key_type, nullable=False, server_default=""))
    op.add_column("queues", sa.Column("key_limit", sa.Integer(), nullable=True))
    op.add_column("queues", sa.Column("keyed", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index(
        "ix_jobs_claim_turns",
        "jobs",
        ["queue", sa.literal_column("priority DESC"), "concurrency_key", "run_at_ms", "id"],
        sqlite_where=sa.text(_CLAIMABLE),
        postgresql_where=sa.text(_CLAIMABLE),
    )
    # Partial over leased jobs only: as small as the workers' in-flight jobs.
    op.create_index(
        "ix_jobs_queue_key_leased",
        "jobs",
        ["queue", "concurrency_key"],
        sqlite_where=sa.text(_LEASED),
        postgresql_where=sa.text(_LEASED),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_queue_key_leased", table_name="jobs")
    op.drop_index("ix_jobs_claim_turns", table_name="jobs")
    op.drop_column("queues", "keyed")
    op.drop_column("queues", "key_limit")
    op.drop_column("jobs", "concurrency_key")
