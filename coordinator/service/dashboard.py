"""Dashboard sessions: what a signed-in browser holds instead of the token it signed in
with.

A session ID is ``secrets.token_urlsafe(32)`` (256 random bits). The store keeps its
SHA-256 with the token's ID and its end, so the ID in a stolen database signs nobody in,
and the ID in a stolen cookie is not the token: it works on the dashboard only, ends at
sign-out, at its expiry, and when its token is revoked (every lookup joins the token
and skips revoked ones), on every replica at once since they share the database.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from coordinator.config import DashboardLimits
from coordinator.domain.access import Principal
from coordinator.domain.clock import Clock
from coordinator.store import Store, Tx

SESSION_ID_BYTES = 32
_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{43}$")
PURGE_BATCH = 500
"""Expired sessions each sign-in deletes at most: the clean-up stays a small write."""


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class DashboardSessions:
    def __init__(self, store: Store, clock: Clock, ttl_s: float, limits: DashboardLimits) -> None:
        self.store = store
        self.clock = clock
        self.ttl_ms = int(ttl_s * 1000)
        self.limits = limits

    def open(self, principal: Principal) -> str:
        """A new session for an authenticated token's principal; returns its ID (the
        cookie's value, never stored). Also clears expired sessions and the token's
        oldest beyond ``max_sessions_per_token``."""
        if principal.token_id is None:
            raise ValueError("only a token's principal has sessions")
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        now = self.clock.now_ms()
        token_id, keep = principal.token_id, self.limits.max_sessions_per_token

        def open_session(tx: Tx) -> None:
            tx.purge_expired_dashboard_sessions(now, PURGE_BATCH)
            tx.insert_dashboard_session(_hash(session_id), token_id, now, now + self.ttl_ms, keep)

        self.store.transact(open_session, what="a dashboard sign-in")
        return session_id

    def principal(self, session_id: str) -> Principal | None:
        """The principal of a live session (unexpired, its token unrevoked), else None.
        Anything not shaped like a session ID is refused without a database read."""
        if not _SESSION_ID.match(session_id):
            return None
        record = self.store.dashboard_session_token(_hash(session_id), self.clock.now_ms())
        if record is None:
            return None
        return Principal(token_id=record.id, name=record.name, scopes=record.scopes, queues=record.queues)

    def close(self, session_id: str) -> bool:
        """Ends a session (sign-out); False when there was none."""
        if not _SESSION_ID.match(session_id):
            return False
        return self.store.transact(
            lambda tx: tx.delete_dashboard_session(_hash(session_id)), what="a dashboard sign-out"
        )
