"""Dashboard sessions kept in the database: the hash of each session's random ID, its
token and its end, so a sign-out or a token's revocation ends it on every replica

Revision ID: 0018_dashboard_sessions
Revises: 0017_keys_per_queue
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_dashboard_sessions"
down_revision = "0017_keys_per_queue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dashboard_sessions",
        sa.Column("id_sha256", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.String(length=32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id_sha256"),
    )
    op.create_index("ix_dashboard_sessions_token", "dashboard_sessions", ["token_id", "created_at_ms"])
    op.create_index("ix_dashboard_sessions_expires", "dashboard_sessions", ["expires_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_dashboard_sessions_expires", table_name="dashboard_sessions")
    op.drop_index("ix_dashboard_sessions_token", table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
