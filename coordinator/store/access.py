"""Tokens and the audit log in the store (R-20, R-22).

Functions over a connection: inside a write transaction (``WriteTx.conn``), so an audit
event commits or rolls back with the change it records, or over ``Store.read()``. The
audit log has inserts and reads only; the database refuses updates and deletes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, insert, select, text, update

from coordinator.domain.access import Scope, format_scopes
from coordinator.store.schema import audit_events, tokens


@dataclass(frozen=True, slots=True)
class TokenRecord:
    id: str
    name: str
    secret_sha256: str
    scopes: frozenset[Scope]
    queues: frozenset[str] | None
    created_at_ms: int
    created_by: str | None
    revoked_at_ms: int | None

    @property
    def revoked(self) -> bool:
        return self.revoked_at_ms is not None

    @classmethod
    def from_row(cls, row: Any) -> TokenRecord:
        values = dict(row._mapping)
        scopes = frozenset(Scope(name) for name in values["scopes"].split(",") if name)
        queues = values["queues"]
        return cls(
            id=values["id"],
            name=values["name"],
            secret_sha256=values["secret_sha256"],
            scopes=scopes,
            queues=frozenset(queues.split(",")) if queues else None,
            created_at_ms=values["created_at_ms"],
            created_by=values["created_by"],
            revoked_at_ms=values["revoked_at_ms"],
        )

    def row(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "secret_sha256": self.secret_sha256,
            "scopes": format_scopes(self.scopes),
            "queues": ",".join(sorted(self.queues)) if self.queues else None,
            "created_at_ms": self.created_at_ms,
            "created_by": self.created_by,
            "revoked_at_ms": self.revoked_at_ms,
        }


@dataclass(frozen=True, slots=True)
class AuditEvent:
    at_ms: int
    actor_token_id: str | None
    actor_name: str
    action: str
    target: str
    peer: str
    detail: str | None = None
    id: int | None = None
    """Assigned by the database; None before the insert."""

    @classmethod
    def from_row(cls, row: Any) -> AuditEvent:
        return cls(**dict(row._mapping))


# -- tokens ---------------------------------------------------------------------------


def lock_tokens(conn: Connection) -> None:
    """Serialises token bootstrap between replicas starting together (PostgreSQL; SQLite's
    write transactions are serial already)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("LOCK TABLE tokens IN SHARE ROW EXCLUSIVE MODE"))


def has_tokens(conn: Connection) -> bool:
    return conn.execute(select(func.count()).select_from(tokens)).scalar_one() > 0


def insert_token(conn: Connection, token: TokenRecord) -> None:
    conn.execute(insert(tokens), [token.row()])


def get_token(conn: Connection, token_id: str) -> TokenRecord | None:
    row = conn.execute(select(tokens).where(tokens.c.id == token_id)).first()
    return TokenRecord.from_row(row) if row is not None else None


def list_tokens(conn: Connection, *, include_revoked: bool) -> list[TokenRecord]:
    query = select(tokens).order_by(tokens.c.created_at_ms, tokens.c.id)
    if not include_revoked:
        query = query.where(tokens.c.revoked_at_ms.is_(None))
    return [TokenRecord.from_row(row) for row in conn.execute(query)]


def revoke_token(conn: Connection, token_id: str, now_ms: int) -> bool:
    """Marks the token revoked; False when it does not exist or already was."""
    statement = (
        update(tokens)
        .where(tokens.c.id == token_id, tokens.c.revoked_at_ms.is_(None))
        .values(revoked_at_ms=now_ms)
    )
    return conn.execute(statement).rowcount == 1


# -- audit log ------------------------------------------------------------------------


def insert_audit_event(conn: Connection, event: AuditEvent) -> None:
    row = {
        "at_ms": event.at_ms,
        "actor_token_id": event.actor_token_id,
        "actor_name": event.actor_name[:128],
        "action": event.action,
        "target": event.target[:128],
        "peer": event.peer[:256],
        "detail": event.detail,
    }
    conn.execute(insert(audit_events), [row])


def list_audit_events(
    conn: Connection, *, action: str | None, target: str | None, before_id: int | None, limit: int
) -> list[AuditEvent]:
    """Newest first, keyset-paged before ``before_id``."""
    conditions = []
    if action is not None:
        conditions.append(audit_events.c.action == action)
    if target is not None:
        conditions.append(audit_events.c.target == target)
    if before_id is not None:
        conditions.append(audit_events.c.id < before_id)
    query = select(audit_events).where(*conditions).order_by(audit_events.c.id.desc()).limit(limit)
    return [AuditEvent.from_row(row) for row in conn.execute(query)]
