"""Jobs keep the W3C trace context they were enqueued with

Revision ID: 0022_job_trace_context
Revises: 0021_attempt_progress
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022_job_trace_context"
down_revision = "0021_attempt_progress"
branch_labels = None
depends_on = None

# worker_sdk.trace_rules' bounds, written out: a migration keeps the shape it had.
_TRACEPARENT_LENGTH = 55
_MAX_TRACESTATE_BYTES = 512


def upgrade() -> None:
    # Nullable without a default: adding them rewrites no rows on either engine, and
    # the jobs already stored simply have no trace context.
    op.add_column("jobs", sa.Column("traceparent", sa.String(_TRACEPARENT_LENGTH), nullable=True))
    op.add_column("jobs", sa.Column("tracestate", sa.String(_MAX_TRACESTATE_BYTES), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tracestate")
        batch.drop_column("traceparent")
