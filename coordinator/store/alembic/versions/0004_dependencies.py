"""Job dependencies: one row per (child, parent), with the parent's output once it
succeeded (R-15, R-16)

Revision ID: 0004_dependencies
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_dependencies"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dependencies",
        sa.Column("child_id", sa.String(length=36), nullable=False),
        sa.Column("parent_id", sa.String(length=36), nullable=False),
        sa.Column("satisfied", sa.Boolean(), nullable=False),
        sa.Column("parent_output", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(["child_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("child_id", "parent_id"),
    )
    op.create_index("ix_dependencies_parent", "dependencies", ["parent_id"])


def downgrade() -> None:
    op.drop_index("ix_dependencies_parent", table_name="dependencies")
    op.drop_table("dependencies")
