"""Tokens, the append-only audit log, and the cancel-requested flag on jobs

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_APPEND_ONLY = "audit_events is append-only"


def upgrade() -> None:
    # A constant default: SQLite adds the column in place, PostgreSQL without a rewrite.
    op.add_column(
        "jobs", sa.Column("cancel_requested", sa.Boolean(), server_default=sa.false(), nullable=False)
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.String(length=128), nullable=False),
        sa.Column("queues", sa.Text(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(length=32), nullable=True),
        sa.Column("revoked_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "audit_events",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False
        ),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor_token_id", sa.String(length=32), nullable=True),
        sa.Column("actor_name", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=128), nullable=False),
        sa.Column("peer", sa.String(length=256), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.create_index("ix_audit_events_target", ["target", "id"], unique=False)

    # The audit log is append-only in the database too, not only by convention.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION runwick_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{_APPEND_ONLY}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events "
            "FOR EACH ROW EXECUTE FUNCTION runwick_audit_append_only()"
        )
    else:
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_events_no_{event.lower()} BEFORE {event} ON audit_events "
                f"BEGIN SELECT RAISE(ABORT, '{_APPEND_ONLY}'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_events_append_only ON audit_events")
        op.execute("DROP FUNCTION IF EXISTS runwick_audit_append_only()")
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_events_target")
    op.drop_table("audit_events")
    op.drop_table("tokens")
    # In place (SQLite >= 3.35): a batch copy of jobs would lose nothing but take long.
    op.drop_column("jobs", "cancel_requested")
