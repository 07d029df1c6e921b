"""The audit log refuses TRUNCATE on PostgreSQL, as it refuses UPDATE and DELETE

Revision ID: 0019_audit_truncate
Revises: 0018_dashboard_sessions
"""

from __future__ import annotations

from alembic import op

revision = "0019_audit_truncate"
down_revision = "0018_dashboard_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Row triggers (0002) never fire for TRUNCATE, which empties the table at once; a
    # statement trigger does. It reuses 0002's function, which raises "audit_events is
    # append-only". SQLite has no TRUNCATE: its DELETE without WHERE fires the row
    # triggers of 0002 (a table with triggers is never emptied the fast way).
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events "
            "FOR EACH STATEMENT EXECUTE FUNCTION runwick_audit_append_only()"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_events_no_truncate ON audit_events")
