"""Errors become gRPC statuses here, in one place, for every RPC (unary and streaming).

Each ``CoordinatorError`` becomes the status code of its class (one table) and a
``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer (grpcio-status) holding

- ``google.rpc.ErrorInfo``: ``reason`` (e.g. ``PAYLOAD_TOO_LARGE``), ``domain``
  ``"runwick"`` and the error's ``metadata`` (e.g. ``size_bytes``, ``limit_bytes``);
- ``google.rpc.BadRequest`` with one field violation (``jobs[2].payload``) for
  ``InvalidArgument``.

A request that does not parse as its protobuf message is INVALID_ARGUMENT
(``MALFORMED_MESSAGE``); any other exception is logged and answered INTERNAL, so no
input crashes the server. Messages and details are cut to sizes that fit gRPC's
trailing-metadata limit, whatever the client sent.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from coordinator.errors import (
    AlreadyExists,
    CoordinatorError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from worker_sdk.grammar import TRUNCATION_MARKER, truncate_utf8

log = logging.getLogger(__name__)

ERROR_DOMAIN = "runwick"
"""``google.rpc.ErrorInfo.domain`` of every Runwick error."""
# gRPC refuses trailers over 8 KiB (grpc.max_metadata_size): the message travels twice
# (grpc-message, percent-encoded, and inside the base64 details), so all is kept small.
MAX_STATUS_MESSAGE_BYTES = 512
MAX_DESCRIPTION_BYTES = 256
MAX_METADATA_ENTRIES = 8
MAX_METADATA_VALUE_BYTES = 128
INTERNAL_REASON = "INTERNAL"
MALFORMED_REASON = "MALFORMED_MESSAGE"

STATUS_BY_ERROR: dict[type[CoordinatorError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def status_for(error: CoordinatorError) -> grpc.StatusCode:
    for kind in type(error).__mro__:
        if kind in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[kind]
    return grpc.StatusCode.UNKNOWN


def rich_status(
    code: grpc.StatusCode,
    message: str,
    reason: str,
    metadata: Mapping[str, str] | None = None,
    violations: Sequence[tuple[str, str]] = (),
) -> grpc.Status:
    """A status with ErrorInfo and, when ``violations`` are given, BadRequest details."""
    message = truncate_utf8(message, MAX_STATUS_MESSAGE_BYTES, TRUNCATION_MARKER)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN)
    for key, value in list((metadata or {}).items())[:MAX_METADATA_ENTRIES]:
        info.metadata[key[:64]] = truncate_utf8(value, MAX_METADATA_VALUE_BYTES, TRUNCATION_MARKER)
    details = [info]
    if violations:
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=truncate_utf8(field, MAX_DESCRIPTION_BYTES),
                        description=truncate_utf8(description, MAX_DESCRIPTION_BYTES, TRUNCATION_MARKER),
                    )
                    for field, description in violations
                ]
            )
        )
    status = status_pb2.Status(code=_rpc_code(code), message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    result: grpc.Status = rpc_status.to_status(status)
    return result


def status_of(error: CoordinatorError) -> grpc.Status:
    """The status a client receives for ``error``."""
    violations = [(error.field, error.description)] if isinstance(error, InvalidArgument) else []
    return rich_status(status_for(error), str(error), error.reason, error.metadata, violations)


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: CoordinatorError) -> NoReturn:
    """Ends the RPC with ``error``'s status and details."""
    await abort_with(context, status_of(error))


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], status: grpc.Status) -> NoReturn:
    """``context.abort_with_status`` spelled with the typed ``abort``."""
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("abort returned")  # it raises AbortError


def _rpc_code(code: grpc.StatusCode) -> int:
    value = code.value[0]
    return int(value) if isinstance(value, int) else code_pb2.UNKNOWN


class _Undecodable:
    """Stands in for a request whose bytes do not parse, so the RPC can say so."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def as_error(self) -> InvalidArgument:
        return InvalidArgument(
            "request",
            f"the message is not a valid protobuf message of this RPC's request type ({self.error})",
            reason=MALFORMED_REASON,
        )


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # gRPC would answer INTERNAL for a parse failure
            return _Undecodable(exc)

    return parse


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, _Undecodable):
            raise request.as_error()
        yield request


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Turns CoordinatorError into its status and any other exception into INTERNAL
    (logged, never crashing the server), for unary and stream-stream RPCs."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _guard_unary(handler.unary_unary, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None and inspect.isasyncgenfunction(handler.stream_stream):
            return grpc.stream_stream_rpc_method_handler(
                _guard_stream(handler.stream_stream, method),
                request_deserializer=_lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler


def _guard_unary(behaviour: Any, method: str) -> Callable[..., Awaitable[Any]]:
    async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            if isinstance(request, _Undecodable):
                raise request.as_error()
            return await behaviour(request, context)
        except CoordinatorError as exc:
            log.debug("%s answered %s (%s)", method, status_for(exc).name, exc.reason)
            await abort(context, exc)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("unexpected error in %s", method)
            await _abort_internal(context)

    return guarded


def _guard_stream(behaviour: Any, method: str) -> Callable[..., AsyncIterator[Any]]:
    async def guarded(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        try:
            async for response in behaviour(_checked(requests), context):
                yield response
        except CoordinatorError as exc:
            log.debug("%s answered %s (%s)", method, status_for(exc).name, exc.reason)
            await abort(context, exc)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("unexpected error in %s", method)
            await _abort_internal(context)

    return guarded


async def _abort_internal(context: grpc.aio.ServicerContext[Any, Any]) -> NoReturn:
    await abort_with(
        context,
        rich_status(grpc.StatusCode.INTERNAL, "internal error; see the coordinator's log", INTERNAL_REASON),
    )
