"""One partial index of leased jobs by queue, key and state instead of two

Revision ID: 0025_one_leased_index
Revises: 0024_queue_rates

``ix_jobs_queue_leased`` (queue, state) and ``ix_jobs_queue_key_leased`` (queue, key)
answered one question each; ``ix_jobs_queue_key_leased`` on (queue, key, state) answers
both, and a claim, a start and an end each rewrite one index entry fewer.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_one_leased_index"
down_revision = "0024_queue_rates"
branch_labels = None
depends_on = None

_LEASED = "state IN ('reserved', 'running')"


def _leased_index(name: str, columns: list[str]) -> None:
    op.create_index(name, "jobs", columns, sqlite_where=sa.text(_LEASED), postgresql_where=sa.text(_LEASED))


def upgrade() -> None:
    op.drop_index("ix_jobs_queue_key_leased", table_name="jobs")
    op.drop_index("ix_jobs_queue_leased", table_name="jobs")
    _leased_index("ix_jobs_queue_key_leased", ["queue", "concurrency_key", "state"])


def downgrade() -> None:
    op.drop_index("ix_jobs_queue_key_leased", table_name="jobs")
    _leased_index("ix_jobs_queue_leased", ["queue", "state"])
    _leased_index("ix_jobs_queue_key_leased", ["queue", "concurrency_key"])
