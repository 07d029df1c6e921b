"""A write transaction's token and audit-log operations (R-20, R-22)."""

from __future__ import annotations

from sqlalchemy import func, insert, select, text, update

from coordinator.domain.records import AuditEvent, TokenRecord
from coordinator.store import dashboard_sessions
from coordinator.store.rows import event_row, token_from_row, token_row
from coordinator.store.schema import audit_events, tokens
from coordinator.store.tx_base import TxBase


class AccessOps(TxBase):
    # -- tokens and the audit log (R-20, R-22) -----------------------------------------

    def lock_tokens(self) -> None:
        """Serialises token bootstrap between replicas starting together (PostgreSQL;
        SQLite's write transactions are serial already)."""
        if self._postgres:
            self._conn.execute(text("LOCK TABLE tokens IN SHARE ROW EXCLUSIVE MODE"))

    def has_tokens(self) -> bool:
        return int(self._conn.execute(select(func.count()).select_from(tokens)).scalar_one()) > 0

    def insert_token(self, token: TokenRecord) -> None:
        self._conn.execute(insert(tokens), [token_row(token)])

    def get_token(self, token_id: str) -> TokenRecord | None:
        row = self._conn.execute(select(tokens).where(tokens.c.id == token_id)).first()
        return token_from_row(row) if row is not None else None

    def revoke_token(self, token_id: str, now_ms: int) -> bool:
        """Marks the token revoked; False when it does not exist or already was."""
        statement = (
            update(tokens)
            .where(tokens.c.id == token_id, tokens.c.revoked_at_ms.is_(None))
            .values(revoked_at_ms=now_ms)
        )
        return bool(self._conn.execute(statement).rowcount == 1)

    def insert_audit_event(self, event: AuditEvent) -> None:
        """Audit events commit or roll back with the change they record; the database
        refuses updates and deletes of them."""
        self._conn.execute(insert(audit_events), [event_row(event)])

    # -- dashboard sessions (``store.dashboard_sessions``) ---------------------------------

    def insert_dashboard_session(
        self, id_sha256: str, token_id: str, now_ms: int, expires_at_ms: int, keep_per_token: int
    ) -> None:
        dashboard_sessions.insert_session(
            self._conn, id_sha256, token_id, now_ms, expires_at_ms, keep_per_token
        )

    def delete_dashboard_session(self, id_sha256: str) -> bool:
        return dashboard_sessions.delete_session(self._conn, id_sha256)

    def purge_expired_dashboard_sessions(self, now_ms: int, limit: int) -> int:
        return dashboard_sessions.purge_expired(self._conn, now_ms, limit)
