"""The job path's identifier columns compared byte by byte on PostgreSQL (collation "C")

Revision ID: 0014_key_collation
Revises: 0013_finished_indexes
"""

from __future__ import annotations

from alembic import op

revision = "0014_key_collation"
down_revision = "0013_finished_indexes"
branch_labels = None
depends_on = None

# Each table's identifier columns and their lengths, as this revision found them.
_KEY_COLUMNS: dict[str, tuple[tuple[str, int], ...]] = {
    "jobs": (
        ("id", 36),
        ("wire_name", 256),
        ("queue", 256),
        ("state", 16),
        ("idempotency_key", 256),
        ("current_attempt_id", 36),
        ("worker_id", 256),
        ("unique_key", 256),
    ),
    "attempts": (("id", 36), ("job_id", 36), ("worker_id", 256), ("token_id", 32)),
    "queues": (("name", 256),),
    "queue_counts": (("queue", 256), ("state", 16)),
    "queue_count_deltas": (("queue", 256), ("state", 16)),
    "queue_finished": (("queue", 256), ("state", 16)),
    "dependencies": (("child_id", 36), ("parent_id", 36)),
    "transitions": (("job_id", 36),),
}


def _set_collation(collation: str) -> None:
    # SQLite compares text byte by byte already: nothing to change there. On PostgreSQL
    # the database's collation (a locale's) made every index comparison of an ID call
    # strcoll. The type stays, so no table is rewritten; each table's indexes on these
    # columns are rebuilt (one ALTER per table, so once), and writes to it wait for that.
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in _KEY_COLUMNS.items():
        changes = ", ".join(
            f'ALTER COLUMN {name} TYPE varchar({length}) COLLATE "{collation}"' for name, length in columns
        )
        op.execute(f"ALTER TABLE {table} {changes}")


def upgrade() -> None:
    _set_collation("C")


def downgrade() -> None:
    _set_collation("default")
