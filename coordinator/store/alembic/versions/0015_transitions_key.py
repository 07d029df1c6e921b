"""Transitions keyed by (job_id, seq): no surrogate key, no second index, no foreign key

Revision ID: 0015_transitions_key
Revises: 0014_key_collation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_transitions_key"
down_revision = "0014_key_collation"
branch_labels = None
depends_on = None

_COPIED = "job_id, seq, at_ms, from_state, to_state, attempt_id, reason"


def _history_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("attempt_id", sa.String(length=36), nullable=True),
        sa.Column("reason", sa.String(length=128), nullable=True),
    ]


def _drop_repeated_sequences() -> None:
    # A job's writes are guarded by the history sequence they read, so no two of its
    # transitions should share one; should a database hold such a pair anyway, the
    # first written is kept and the key can be built.
    op.execute(
        "DELETE FROM transitions WHERE id IN (SELECT later.id FROM transitions later"
        " JOIN transitions earlier ON earlier.job_id = later.job_id"
        " AND earlier.seq = later.seq AND earlier.id < later.id)"
    )


def upgrade() -> None:
    # Four transitions per job made this the most written table, each row costing a
    # table insert, two index inserts (the ID's and ix_transitions_job_seq), the ID's
    # sequence and a foreign-key lookup of the job. Keyed by (job_id, seq) it is one
    # B-tree per row. Rebuilding the key reads the whole table; writes to it wait.
    _drop_repeated_sequences()
    op.drop_index("ix_transitions_job_seq", table_name="transitions")
    if op.get_bind().dialect.name == "postgresql":
        for foreign_key in sa.inspect(op.get_bind()).get_foreign_keys("transitions"):
            name = foreign_key["name"]
            assert name is not None  # PostgreSQL names every constraint
            op.drop_constraint(name, "transitions", type_="foreignkey")
        # ``id`` stays, no longer written, for the coordinators of before this revision
        # that a rolling upgrade has not replaced yet: they select it with the history.
        op.execute(
            "ALTER TABLE transitions DROP CONSTRAINT transitions_pkey, ALTER COLUMN id DROP DEFAULT,"
            " ALTER COLUMN id DROP NOT NULL, ADD PRIMARY KEY (job_id, seq)"
        )
        op.execute("DROP SEQUENCE IF EXISTS transitions_id_seq")
        return
    # SQLite changes a key only by copying the table.
    op.create_table(
        "transitions_keyed",
        sa.Column("id", sa.BigInteger(), nullable=True),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        *_history_columns(),
        sa.PrimaryKeyConstraint("job_id", "seq"),
        sqlite_with_rowid=False,
    )
    op.execute(f"INSERT INTO transitions_keyed (id, {_COPIED}) SELECT id, {_COPIED} FROM transitions")
    op.drop_table("transitions")
    op.rename_table("transitions_keyed", "transitions")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE transitions DROP CONSTRAINT transitions_pkey, DROP COLUMN id,"
            " ADD COLUMN id BIGSERIAL PRIMARY KEY"
        )
        op.create_foreign_key(None, "transitions", "jobs", ["job_id"], ["id"], ondelete="CASCADE")
    else:
        op.create_table(
            "transitions_with_id",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("job_id", sa.String(length=36), nullable=False),
            *_history_columns(),
            sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
            sa.PrimaryKeyConstraint("id"),
        )
        op.execute(
            f"INSERT INTO transitions_with_id ({_COPIED})"
            f" SELECT {_COPIED} FROM transitions ORDER BY job_id, seq"
        )
        op.drop_table("transitions")
        op.rename_table("transitions_with_id", "transitions")
    op.create_index("ix_transitions_job_seq", "transitions", ["job_id", "seq"])
