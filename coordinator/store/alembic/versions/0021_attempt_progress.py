"""Attempts keep the latest progress their handler reported

Revision ID: 0021_attempt_progress
Revises: 0020_queue_lifecycle
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_attempt_progress"
down_revision = "0020_queue_lifecycle"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable without a default: adding it rewrites no rows on either engine.
    op.add_column("attempts", sa.Column("progress", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "progress")
