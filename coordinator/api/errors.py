"""Domain errors become gRPC status codes here, in one table, for every unary RPC."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from coordinator.errors import CoordinatorError, FailedPrecondition, InvalidArgument, NotFound, Unavailable

log = logging.getLogger(__name__)

STATUS_BY_ERROR: dict[type[CoordinatorError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}


def status_for(error: CoordinatorError) -> grpc.StatusCode:
    for kind in type(error).__mro__:
        if kind in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[kind]
    return grpc.StatusCode.UNKNOWN


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Turns CoordinatorError into its status and any other exception into INTERNAL
    (logged, never crashing the server)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary
        method = handler_call_details.method

        async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return await behaviour(request, context)  # type: ignore[arg-type]
            except CoordinatorError as exc:
                await context.abort(status_for(exc), str(exc))
            except grpc.aio.AbortError:
                raise
            except Exception:
                log.exception("unexpected error in %s", method)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the coordinator's log")

        return grpc.unary_unary_rpc_method_handler(
            guarded,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
