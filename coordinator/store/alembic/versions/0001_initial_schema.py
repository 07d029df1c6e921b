"""Initial schema: jobs, attempts and bounded transition history

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("wire_name", sa.String(length=256), nullable=False),
        sa.Column("queue", sa.String(length=256), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("run_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("payload_version", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=256), nullable=True),
        sa.Column("max_executions", sa.Integer(), nullable=False),
        sa.Column("retry_initial_delay_ms", sa.BigInteger(), nullable=False),
        sa.Column("retry_max_delay_ms", sa.BigInteger(), nullable=False),
        sa.Column("execution_timeout_ms", sa.BigInteger(), nullable=True),
        sa.Column("max_unstarted_abandonments", sa.Integer(), nullable=False),
        sa.Column("unstarted_initial_delay_ms", sa.BigInteger(), nullable=False),
        sa.Column("unstarted_max_delay_ms", sa.BigInteger(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("executions", sa.Integer(), nullable=False),
        sa.Column("unstarted_streak", sa.Integer(), nullable=False),
        sa.Column("current_attempt_id", sa.String(length=36), nullable=True),
        sa.Column("worker_id", sa.String(length=256), nullable=True),
        sa.Column("lease_expires_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_error_code", sa.String(length=128), nullable=True),
        sa.Column("output", sa.LargeBinary(), nullable=True),
        sa.Column("history_seq", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobs_claim",
            ["queue", sa.literal_column("priority DESC"), "run_at_ms", "id"],
            unique=False,
            sqlite_where=sa.text("state IN ('available', 'scheduled')"),
            postgresql_where=sa.text("state IN ('available', 'scheduled')"),
        )
        batch_op.create_index(
            "ix_jobs_leased",
            ["state"],
            unique=False,
            sqlite_where=sa.text("state IN ('reserved', 'running')"),
            postgresql_where=sa.text("state IN ('reserved', 'running')"),
        )
        batch_op.create_index("ix_jobs_queue_id", ["queue", "id"], unique=False)
        batch_op.create_index("ix_jobs_state_id", ["state", "id"], unique=False)
        batch_op.create_index(
            "ux_jobs_idempotency_key",
            ["idempotency_key"],
            unique=True,
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        )

    op.create_table(
        "attempts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(length=256), nullable=False),
        sa.Column("execution_number", sa.Integer(), nullable=False),
        sa.Column("claimed_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.Column("error_code", sa.String(length=128), nullable=True),
        sa.Column("exception_type", sa.String(length=512), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("retry_delay_ms", sa.BigInteger(), nullable=True),
        sa.Column("job_state_after", sa.String(length=16), nullable=True),
        sa.Column("reported", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.create_index("ix_attempts_job", ["job_id", "claimed_at_ms"], unique=False)

    op.create_table(
        "transitions",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("attempt_id", sa.String(length=36), nullable=True),
        sa.Column("reason", sa.String(length=128), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("transitions", schema=None) as batch_op:
        batch_op.create_index("ix_transitions_job_seq", ["job_id", "seq"], unique=False)

    if op.get_bind().dialect.name == "postgresql":
        # Jobs churn: leave room on each page so heartbeat and state updates stay HOT,
        # and vacuum the table far sooner than the global default (docs/scaling.md).
        op.execute(
            "ALTER TABLE jobs SET (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, "
            "autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000)"
        )


def downgrade() -> None:
    with op.batch_alter_table("transitions", schema=None) as batch_op:
        batch_op.drop_index("ix_transitions_job_seq")

    op.drop_table("transitions")
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_attempts_job")

    op.drop_table("attempts")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(
            "ux_jobs_idempotency_key",
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        )
        batch_op.drop_index("ix_jobs_state_id")
        batch_op.drop_index("ix_jobs_queue_id")
        batch_op.drop_index(
            "ix_jobs_leased",
            sqlite_where=sa.text("state IN ('reserved', 'running')"),
            postgresql_where=sa.text("state IN ('reserved', 'running')"),
        )
        batch_op.drop_index(
            "ix_jobs_claim",
            sqlite_where=sa.text("state IN ('available', 'scheduled')"),
            postgresql_where=sa.text("state IN ('available', 'scheduled')"),
        )

    op.drop_table("jobs")
