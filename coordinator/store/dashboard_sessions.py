"""The store's dashboard sessions: the read each dashboard request makes (the session's
token, when the session and the token are both still good) and the writes of sign-in and
sign-out (``Tx``). Rows are keyed by the SHA-256 of the session ID, never the ID."""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select

from coordinator.domain.records import TokenRecord
from coordinator.store.rows import token_from_row
from coordinator.store.schema import dashboard_sessions, tokens


def session_token(conn: Connection, id_sha256: str, now_ms: int) -> TokenRecord | None:
    """The unrevoked token of an unexpired session, else None."""
    statement = (
        select(tokens)
        .join(dashboard_sessions, dashboard_sessions.c.token_id == tokens.c.id)
        .where(
            dashboard_sessions.c.id_sha256 == id_sha256,
            dashboard_sessions.c.expires_at_ms > now_ms,
            tokens.c.revoked_at_ms.is_(None),
        )
    )
    row = conn.execute(statement).first()
    return token_from_row(row) if row is not None else None


def insert_session(
    conn: Connection, id_sha256: str, token_id: str, now_ms: int, expires_at_ms: int, keep_per_token: int
) -> None:
    """Adds a session and drops the token's oldest beyond ``keep_per_token``, so repeated
    sign-ins with one token cannot grow the table without bound."""
    conn.execute(
        insert(dashboard_sessions),
        [
            {
                "id_sha256": id_sha256,
                "token_id": token_id,
                "created_at_ms": now_ms,
                "expires_at_ms": expires_at_ms,
            }
        ],
    )
    newest = (
        select(dashboard_sessions.c.id_sha256)
        .where(dashboard_sessions.c.token_id == token_id)
        .order_by(dashboard_sessions.c.created_at_ms.desc(), dashboard_sessions.c.id_sha256)
        .limit(keep_per_token)
    )
    conn.execute(
        delete(dashboard_sessions).where(
            dashboard_sessions.c.token_id == token_id, dashboard_sessions.c.id_sha256.not_in(newest)
        )
    )


def delete_session(conn: Connection, id_sha256: str) -> bool:
    """Ends a session; False when there was none."""
    return bool(
        conn.execute(delete(dashboard_sessions).where(dashboard_sessions.c.id_sha256 == id_sha256)).rowcount
    )


def purge_expired(conn: Connection, now_ms: int, limit: int) -> int:
    """Deletes up to ``limit`` expired sessions; how many it deleted."""
    expired = (
        select(dashboard_sessions.c.id_sha256)
        .where(dashboard_sessions.c.expires_at_ms <= now_ms)
        .limit(limit)
    )
    statement = delete(dashboard_sessions).where(dashboard_sessions.c.id_sha256.in_(expired))
    return int(conn.execute(statement).rowcount)
