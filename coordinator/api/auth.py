"""Authentication and authorization of every RPC, in one server interceptor (R-20, R-21).

Each call carries ``authorization: Bearer <token>`` metadata. The interceptor finds the
token (through the facade's token cache), checks that it grants the scope the method needs (the table
below: each scope grants exactly its own RPCs), and runs the call with the token's
principal in ``current_principal()`` for the servicers (audit actors, a worker token's
queue restriction). Health checking and reflection stay open. A method of ours missing
from the table is refused to everyone: new RPCs must be given a scope here.

Refusals: no token, a malformed, unknown or revoked token -> UNAUTHENTICATED; a valid
token without the scope -> PERMISSION_DENIED.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

from coordinator.app import Coordinator
from coordinator.domain.access import ANONYMOUS, Actor, Principal, Scope
from coordinator.errors import Unavailable

log = logging.getLogger(__name__)

_JOBS = "/runwick.v1.JobService/"
_WORKERS = "/runwick.v1.WorkerService/"
_ADMIN = "/runwick.v1.AdminService/"

METHOD_SCOPES: dict[str, Scope] = {
    _JOBS + "Enqueue": Scope.ENQUEUE,
    _JOBS + "GetJob": Scope.READ,
    _JOBS + "ListJobs": Scope.READ,
    _JOBS + "ListAttempts": Scope.READ,
    _JOBS + "WaitJob": Scope.READ,
    _JOBS + "CancelJob": Scope.MANAGE,
    _JOBS + "RetryJob": Scope.MANAGE,
    _JOBS + "RevealError": Scope.REVEAL,
    _WORKERS + "Connect": Scope.WORK,
    _ADMIN + "CreateToken": Scope.ADMIN,
    _ADMIN + "ListTokens": Scope.ADMIN,
    _ADMIN + "RevokeToken": Scope.ADMIN,
    _ADMIN + "ListAuditEvents": Scope.ADMIN,
    _ADMIN + "ListQueues": Scope.READ,
    _ADMIN + "GetQueue": Scope.READ,
    _ADMIN + "PauseQueue": Scope.MANAGE,
    _ADMIN + "ResumeQueue": Scope.MANAGE,
    _ADMIN + "SetQueueLimit": Scope.MANAGE,
    _ADMIN + "SetQueueKeyLimit": Scope.MANAGE,
    _ADMIN + "SetQueueRate": Scope.MANAGE,
    _ADMIN + "DeleteQueue": Scope.ADMIN,
    _ADMIN + "CreateSchedule": Scope.MANAGE,
    _ADMIN + "ListSchedules": Scope.READ,
    _ADMIN + "PauseSchedule": Scope.MANAGE,
    _ADMIN + "ResumeSchedule": Scope.MANAGE,
    _ADMIN + "DeleteSchedule": Scope.MANAGE,
    _ADMIN + "PurgeJobs": Scope.ADMIN,
    _ADMIN + "BulkCancelJobs": Scope.MANAGE,
    _ADMIN + "BulkRetryJobs": Scope.MANAGE,
    _ADMIN + "ListWorkers": Scope.READ,
}
"""R-21: the scope each RPC needs."""

OPEN_SERVICES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
"""Served to anyone: probes and tooling must work without a token."""

_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "runwick_principal", default=None
)

if TYPE_CHECKING:
    Handler: TypeAlias = grpc.RpcMethodHandler[Any, Any]


def current_principal() -> Principal:
    """The caller of the RPC being served. Fails closed outside an authenticated call."""
    principal = _principal.get()
    if principal is None:
        raise RuntimeError("no principal: the call did not pass the auth interceptor")
    return principal


@contextlib.contextmanager
def acting_as(principal: Principal) -> Iterator[None]:
    """Runs the block as ``principal``, as the interceptor runs a call: for code that
    calls a servicer method directly, without the transport (benchmarks)."""
    reset = _principal.set(principal)
    try:
        yield
    finally:
        _principal.reset(reset)


def current_actor(context: grpc.aio.ServicerContext[Any, Any]) -> Actor:
    """The caller and its address, for audit events."""
    return Actor(current_principal(), context.peer() or "unknown")


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Checks the bearer token of every call against ``METHOD_SCOPES``.

    With ``app=None`` (``--insecure``) every call runs as ``ANONYMOUS``.
    """

    def __init__(self, app: Coordinator | None) -> None:
        self.app = app

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_SERVICES):
            return handler
        if self.app is None:
            return _with_principal(handler, ANONYMOUS)
        required = METHOD_SCOPES.get(method)
        if required is None:
            return _refusal(
                handler, grpc.StatusCode.PERMISSION_DENIED, f"{_short(method)} is open to no token"
            )
        token = bearer_token(handler_call_details.invocation_metadata)
        if token is None:
            return _refusal(
                handler,
                grpc.StatusCode.UNAUTHENTICATED,
                "missing bearer token: send the metadata `authorization: Bearer <token>`",
            )
        known, principal = self.app.cached_principal(token)
        if not known:
            try:
                principal = await self.app.authenticate(token)
            except Unavailable as exc:
                return _refusal(handler, grpc.StatusCode.UNAVAILABLE, str(exc))
        if principal is None:
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked token")
        if not principal.allows(required):
            log.info(
                "token %s (%s) refused %s: lacks scope %s",
                principal.token_id,
                principal.name,
                method,
                required,
            )
            return _refusal(
                handler,
                grpc.StatusCode.PERMISSION_DENIED,
                f"token {principal.name!r} ({principal.token_id}) lacks the {required.value!r} scope "
                f"that {_short(method)} needs",
            )
        return _with_principal(handler, principal)


def bearer_token(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    """The token of the first ``authorization: Bearer ...`` entry, if any."""
    for key, value in metadata or ():
        if key.lower() != "authorization" or not isinstance(value, str):
            continue
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
        return None
    return None


def _short(method: str) -> str:
    """``JobService/CancelJob`` for ``/runwick.v1.JobService/CancelJob``."""
    service, _, name = method.lstrip("/").partition("/")
    return f"{service.rsplit('.', 1)[-1]}/{name}"


def _refusal(handler: Handler, code: grpc.StatusCode, message: str) -> Handler:
    """A handler that aborts with ``code`` without reading the request.

    It reads requests as a stream whatever ``handler`` is (the wire is the same for a
    client's unary call), so gRPC does not receive, let alone parse, the body of a call
    refused here: a caller without a token cannot make the coordinator hold or parse
    megabytes. Its deserializer drops any bytes it is ever given.
    """

    async def unary(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)

    async def streaming(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await context.abort(code, message)
        yield  # pragma: no cover - abort raises

    options: dict[str, Any] = {
        "request_deserializer": _dropped,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None or handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary, **options)
    return grpc.stream_stream_rpc_method_handler(streaming, **options)


def _dropped(data: bytes) -> None:
    """The request of a refused call: never parsed."""
    return None


def _with_principal(handler: Handler, principal: Principal) -> Handler:
    """``handler`` run with ``principal`` as the current principal."""
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None or handler.stream_unary is not None:
        streaming_request = handler.unary_unary is None
        unary_behaviour: Any = handler.stream_unary if streaming_request else handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            reset = _principal.set(principal)
            try:
                return await unary_behaviour(request, context)
            finally:
                _principal.reset(reset)

        build: Any = (
            grpc.stream_unary_rpc_method_handler if streaming_request else grpc.unary_unary_rpc_method_handler
        )
        return build(unary, **options)  # type: ignore[no-any-return]

    streaming_request = handler.unary_stream is None
    stream_behaviour: Any = handler.stream_stream if streaming_request else handler.unary_stream

    async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        # Each call runs in its own task, so the value ends with the call; no reset here:
        # an async generator's finally may run in another context.
        _principal.set(principal)
        async for response in stream_behaviour(request, context):
            yield response

    build = (
        grpc.stream_stream_rpc_method_handler if streaming_request else grpc.unary_stream_rpc_method_handler
    )
    return build(streaming, **options)  # type: ignore[no-any-return]
