"""Attempts leave room on each page on PostgreSQL, so their updates are HOT

Revision ID: 0016_attempts_fillfactor
Revises: 0015_transitions_key
"""

from __future__ import annotations

from alembic import op

revision = "0016_attempts_fillfactor"
down_revision = "0015_transitions_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # An attempt is updated twice right after its insert (its start, its end), and no
    # index covers what those updates change, so each could be a HOT update, writing no
    # index entry. Packed full by the inserts around it, its page had no room for the new
    # version: 5% of the updates were HOT under load, and each of the others inserted an
    # entry into both of the table's indexes. Pages filled to half keep room for them
    # (90% HOT in the same run; 70% gave 61%), at twice the table's pages. Only pages
    # written from now on are filled so; SQLite has no such setting.
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE attempts SET (fillfactor = 50)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE attempts RESET (fillfactor)")
