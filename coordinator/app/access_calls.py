"""The facade's calls on access: tokens, dashboard sessions and the audit log."""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.app.core import CoordinatorCore
from coordinator.domain.access import Actor, Principal
from coordinator.domain.records import AuditEvent, TokenRecord
from coordinator.service.tokens import NewToken


class AccessCalls(CoordinatorCore):
    """Tokens (a revoked one's streams end here), dashboard sessions, audit events."""

    def cached_principal(self, token: str) -> tuple[bool, Principal | None]:
        """Answers from the token cache when it can (see ``TokenService``)."""
        return self.tokens.cached_principal(token)

    async def authenticate(self, token: str) -> Principal | None:
        return await self.executors.read(self.tokens.authenticate, token)

    async def create_token(
        self, name: str, scopes: Iterable[str], queues: Iterable[str], actor: Actor
    ) -> NewToken:
        return await self.executors.write(self.tokens.create, name, list(scopes), list(queues), actor)

    async def list_tokens(self, *, include_revoked: bool) -> list[TokenRecord]:
        return await self.executors.read(self.tokens.list, include_revoked=include_revoked)

    async def revoke_token(self, token_id: str, actor: Actor) -> TokenRecord:
        """Revokes the token (audited); streams opened with it end now (here; other
        replicas' at their next reconnect)."""
        record = await self.executors.write(self.tokens.revoke, token_id, actor)
        self.dispatcher.close_token_sessions(record.id)
        return record

    async def open_dashboard_session(self, principal: Principal) -> str:
        """A dashboard session for a token that authenticated; its ID (the cookie)."""
        return await self.executors.write(self.dashboard_sessions.open, principal)

    async def dashboard_principal(self, session_id: str) -> Principal | None:
        """Who a dashboard session stands for, or None when it ended or never was."""
        return await self.executors.read(self.dashboard_sessions.principal, session_id)

    async def close_dashboard_session(self, session_id: str) -> bool:
        return await self.executors.write(self.dashboard_sessions.close, session_id)

    async def list_audit_events(
        self, *, action: str | None, target: str | None, page_size: int, page_token: str
    ) -> tuple[list[AuditEvent], str]:
        return await self.executors.read(
            self.audit_log.list, action=action, target=target, page_size=page_size, page_token=page_token
        )
