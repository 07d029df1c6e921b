"""Idempotency and unique keys per queue, and each dependency row knows its parent's queue

Revision ID: 0017_keys_per_queue
Revises: 0016_attempts_fillfactor
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_keys_per_queue"
down_revision = "0016_attempts_fillfactor"
branch_labels = None
depends_on = None

_KEYED = "idempotency_key IS NOT NULL"
_UNFINISHED = "unique_key IS NOT NULL AND state NOT IN ('succeeded', 'failed', 'cancelled')"


def _queue_column() -> sa.Column[str]:
    # Only read, never compared in SQL: the database's own collation will do.
    return sa.Column("parent_queue", sa.String(256))


def _replace_key_indexes(idempotency: list[str], unique: list[str]) -> None:
    # Inside the migration's one transaction (alembic/env.py). Upgrading, every existing
    # key stays valid: a key unique across all queues is unique within its queue.
    op.drop_index("ux_jobs_idempotency_key", table_name="jobs")
    op.drop_index("ux_jobs_unique_key", table_name="jobs")
    op.create_index(
        "ux_jobs_idempotency_key",
        "jobs",
        idempotency,
        unique=True,
        sqlite_where=sa.text(_KEYED),
        postgresql_where=sa.text(_KEYED),
    )
    op.create_index(
        "ux_jobs_unique_key",
        "jobs",
        unique,
        unique=True,
        sqlite_where=sa.text(_UNFINISHED),
        postgresql_where=sa.text(_UNFINISHED),
    )


def upgrade() -> None:
    _replace_key_indexes(["queue", "idempotency_key"], ["queue", "wire_name", "unique_key"])
    op.add_column("dependencies", _queue_column())
    # The parents still present say their queue; a row whose parent was purged already
    # keeps NULL (unknown), and its output then goes only to workers of any queue.
    op.execute(
        "UPDATE dependencies SET parent_queue ="
        " (SELECT jobs.queue FROM jobs WHERE jobs.id = dependencies.parent_id)"
    )


def downgrade() -> None:
    # Keys were per queue: the same key may now name jobs of two queues, which the global
    # indexes cannot hold. Refuse, changing nothing, rather than drop someone's key.
    bind = op.get_bind()
    clashes = bind.execute(
        sa.text(
            "SELECT count(*) FROM (SELECT idempotency_key FROM jobs WHERE idempotency_key IS NOT NULL"
            " GROUP BY idempotency_key HAVING count(*) > 1) AS taken"
        )
    ).scalar_one()
    clashes += bind.execute(
        sa.text(
            f"SELECT count(*) FROM (SELECT wire_name, unique_key FROM jobs WHERE {_UNFINISHED}"
            " GROUP BY wire_name, unique_key HAVING count(*) > 1) AS taken"
        )
    ).scalar_one()
    if clashes:
        raise RuntimeError(
            f"cannot downgrade below 0017_keys_per_queue: {clashes} idempotency or unique keys are used "
            "in more than one queue; change or remove those jobs' keys first"
        )
    op.drop_column("dependencies", "parent_queue")
    _replace_key_indexes(["idempotency_key"], ["wire_name", "unique_key"])
