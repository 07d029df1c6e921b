"""AdminService: tokens, the audit log and purges (every RPC needs ``admin``, see ``api.auth``)."""

from __future__ import annotations

from typing import Any

import grpc

from coordinator.api.auth import current_actor
from coordinator.api.convert import duration_ms, state_from_pb, timestamp
from coordinator.app import Coordinator
from coordinator.domain.records import AuditEvent, TokenRecord
from worker_sdk.proto.runwick.v1 import admin_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class AdminServicer(admin_service_pb2_grpc.AdminServiceServicer):
    def __init__(self, app: Coordinator) -> None:
        self.app = app

    async def CreateToken(self, request: pb.CreateTokenRequest, context: Context) -> pb.CreateTokenResponse:
        created = await self.app.create_token(
            request.name,
            list(request.scopes),
            list(request.queues),
            current_actor(context),
        )
        return pb.CreateTokenResponse(token=token_to_pb(created.record), secret=created.token)

    async def ListTokens(self, request: pb.ListTokensRequest, context: Context) -> pb.ListTokensResponse:
        records = await self.app.list_tokens(include_revoked=request.include_revoked)
        return pb.ListTokensResponse(tokens=[token_to_pb(r) for r in records])

    async def RevokeToken(self, request: pb.RevokeTokenRequest, context: Context) -> pb.RevokeTokenResponse:
        record = await self.app.revoke_token(request.id, current_actor(context))
        return pb.RevokeTokenResponse(token=token_to_pb(record))

    async def ListAuditEvents(
        self, request: pb.ListAuditEventsRequest, context: Context
    ) -> pb.ListAuditEventsResponse:
        events, token = await self.app.list_audit_events(
            action=request.action or None,
            target=request.target or None,
            page_size=request.page_size,
            page_token=request.page_token,
        )
        return pb.ListAuditEventsResponse(events=[event_to_pb(e) for e in events], next_page_token=token)

    async def PurgeJobs(self, request: pb.PurgeJobsRequest, context: Context) -> pb.PurgeJobsResponse:
        state = state_from_pb(request.state, "state")
        older_than = duration_ms(request.older_than, "older_than") if request.HasField("older_than") else None
        purged = await self.app.purge_jobs(state, older_than, current_actor(context))
        return pb.PurgeJobsResponse(purged=purged)


def token_to_pb(record: TokenRecord) -> pb.Token:
    message = pb.Token(
        id=record.id,
        name=record.name,
        scopes=sorted(s.value for s in record.scopes),
        queues=sorted(record.queues or ()),
        created_at=timestamp(record.created_at_ms),
        created_by=record.created_by or "",
    )
    if record.revoked_at_ms is not None:
        message.revoked_at.CopyFrom(timestamp(record.revoked_at_ms))
    return message


def event_to_pb(event: AuditEvent) -> pb.AuditEvent:
    return pb.AuditEvent(
        id=event.id or 0,
        at=timestamp(event.at_ms),
        actor_token_id=event.actor_token_id or "",
        actor_name=event.actor_name,
        action=event.action,
        target=event.target,
        peer=event.peer,
        detail=event.detail or "",
    )
