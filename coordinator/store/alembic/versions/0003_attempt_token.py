"""The token a claim was made with, on its attempt: every later message about the
attempt must come from a stream of the same worker and token

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: both engines add the column in place. Attempts claimed
    # before the upgrade keep NULL, which only an unauthenticated stream matches.
    op.add_column("attempts", sa.Column("token_id", sa.String(length=32), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "token_id")
