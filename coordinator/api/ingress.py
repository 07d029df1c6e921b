"""What one request may hold, checked on its raw bytes before it is parsed
(docs/security.md, "What the coordinator bounds").

gRPC's receive limit is one number for the whole port, sized for the largest valid
request: an Enqueue of ``max_enqueue_batch`` jobs at ``max_payload_bytes`` (about 38 MiB).
Every other method needs kilobytes, and parsing is what costs: an empty sub-message is 2
bytes on the wire and about 150 bytes once parsed. So each method gets its own limit here,
and the request deserializer checks, in order, before the parser sees a byte:

1. the message's size against the method's limit -> RESOURCE_EXHAUSTED
   (``REQUEST_TOO_LARGE``);
2. for requests with repeated fields, how often those fields occur (a scan of the raw
   bytes, ``api.wire``) against their bounds -> INVALID_ARGUMENT with the bound's own
   reason (``BATCH_TOO_LARGE`` for Enqueue);
3. bytes that are no protobuf message of the method's type, whatever the method (the
   health Watch stream too) -> INVALID_ARGUMENT, ``MALFORMED_MESSAGE``.

A refused request is never parsed; the call ends with the error's status.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from coordinator.api.errors import MALFORMED_REASON, abort
from coordinator.api.wire import OTHER_FIELDS, WireError, count_fields, field_values, sole_field
from coordinator.domain.bounds import KIB, STREAM_BOUNDS, StoreBounds
from coordinator.errors import CoordinatorError, InvalidArgument, ResourceExhausted
from coordinator.validation import MAX_TOKEN_QUEUES, MAX_TOKEN_SCOPES, batch_too_large, too_many_items
from worker_sdk.grammar import MAX_NAME_UTF16_UNITS

SMALL_REQUEST_BYTES = 64 * KIB
"""The limit of every method not named in ``request_limits``: IDs, names, filters and
page tokens, far below it (a filter is at most 256 characters)."""
MAX_OTHER_FIELDS = 64
"""Fields besides the counted repeated ones a request may carry at the level scanned
(a valid request has each at most once; unknown fields of a newer client fit too)."""
_TOKEN_QUEUE_BYTES = 3 * MAX_NAME_UTF16_UNITS + 3
"""A queue name of a CreateToken request on the wire: at most 3 UTF-8 bytes per UTF-16
unit, plus tag and length."""

_JOBS = "/runwick.v1.JobService/"
_WORKERS = "/runwick.v1.WorkerService/"
_ADMIN = "/runwick.v1.AdminService/"

# EnqueueRequest.jobs; CreateTokenRequest.scopes and .queues; ConnectRequest.hello with
# Hello.queues and .wire_names, and ConnectRequest.heartbeat with Heartbeat.attempt_ids
# and .progress (protos/runwick/v1).
_ENQUEUE_JOBS = 1
_TOKEN_SCOPES, _TOKEN_QUEUES = 2, 3
_CONNECT_HELLO, _CONNECT_HEARTBEAT = 1, 4
_HELLO_QUEUES, _HELLO_WIRE_NAMES = 2, 3
_HEARTBEAT_ATTEMPTS, _HEARTBEAT_PROGRESS = 1, 3
_STREAM_COUNTED = {
    _CONNECT_HELLO: (
        ("hello.queues", _HELLO_QUEUES, STREAM_BOUNDS.max_hello_queues, "names"),
        ("hello.wire_names", _HELLO_WIRE_NAMES, STREAM_BOUNDS.max_hello_wire_names, "names"),
    ),
    _CONNECT_HEARTBEAT: (
        ("heartbeat.attempt_ids", _HEARTBEAT_ATTEMPTS, STREAM_BOUNDS.max_heartbeat_attempts, "attempt IDs"),
        ("heartbeat.progress", _HEARTBEAT_PROGRESS, STREAM_BOUNDS.max_heartbeat_attempts, "progress reports"),
    ),
}
"""The repeated fields of a worker-stream message counted before it is parsed: a
heartbeat of five million empty attempt IDs is 10 MB on the wire and far more once
parsed, so it is refused on its count, like a Hello listing too many names."""

Check = Callable[[memoryview], "CoordinatorError | None"]
"""Looks at a request's raw bytes: the error to refuse it with, or None."""


@dataclass(frozen=True, slots=True)
class RequestLimit:
    """What one method's request may hold."""

    max_bytes: int
    """Largest serialized request."""
    check: Check | None = None
    """Counts of its repeated fields, checked after the size and before parsing."""


def request_limits(bounds: StoreBounds, message_limit_bytes: int) -> dict[str, RequestLimit]:
    """The methods whose requests may be larger than ``SMALL_REQUEST_BYTES`` or carry
    repeated fields, each with its limit, derived from ``bounds`` (docs/limits.md)."""
    return {
        _JOBS + "Enqueue": RequestLimit(message_limit_bytes, _enqueue_check(bounds.max_enqueue_batch)),
        # Results carry outputs and batches carry many results: the stream's messages
        # keep the port's limit; what they hold is the worker stream's to bound.
        _WORKERS + "Connect": RequestLimit(message_limit_bytes, _connect_check),
        _ADMIN + "CreateSchedule": RequestLimit(SMALL_REQUEST_BYTES + bounds.max_payload_bytes),
        _ADMIN + "CreateToken": RequestLimit(
            SMALL_REQUEST_BYTES + MAX_TOKEN_QUEUES * _TOKEN_QUEUE_BYTES, _token_check
        ),
    }


def _enqueue_check(max_jobs: int) -> Check:
    def check(data: memoryview) -> CoordinatorError | None:
        counts = count_fields(data, {_ENQUEUE_JOBS: max_jobs, OTHER_FIELDS: MAX_OTHER_FIELDS})
        if counts[_ENQUEUE_JOBS] > max_jobs:
            return batch_too_large(max_jobs)
        return _other_fields(counts)

    return check


def _token_check(data: memoryview) -> CoordinatorError | None:
    limits = {
        _TOKEN_SCOPES: MAX_TOKEN_SCOPES,
        _TOKEN_QUEUES: MAX_TOKEN_QUEUES,
        OTHER_FIELDS: MAX_OTHER_FIELDS,
    }
    counts = count_fields(data, limits)
    if counts[_TOKEN_SCOPES] > MAX_TOKEN_SCOPES:
        return too_many_items("scopes", MAX_TOKEN_SCOPES, "scope names")
    if counts[_TOKEN_QUEUES] > MAX_TOKEN_QUEUES:
        return too_many_items("queues", MAX_TOKEN_QUEUES, "queues")
    return _other_fields(counts)


def _connect_check(data: memoryview) -> CoordinatorError | None:
    """A Hello's queues and wire names and a heartbeat's attempt IDs and progress reports,
    counted as sent (repeats included) over every such field of the message, since the
    parser merges them all into one."""
    sole = sole_field(data)
    if sole is not None and sole not in _STREAM_COUNTED:
        return None  # the fast path of starts, results, releases and credit
    for message_field, counted in _STREAM_COUNTED.items():
        if sole is None or sole == message_field:
            refused = _count_sub_messages(data, message_field, counted)
            if refused is not None:
                return refused
    return None


def _count_sub_messages(
    data: memoryview, message_field: int, counted: tuple[tuple[str, int, int, str], ...]
) -> CoordinatorError | None:
    totals = dict.fromkeys((number for _, number, _, _ in counted), 0)
    limits = {number: limit for _, number, limit, _ in counted}
    for message in field_values(data, message_field, MAX_OTHER_FIELDS):
        counts = count_fields(message, {**limits, OTHER_FIELDS: MAX_OTHER_FIELDS})
        for field, number, limit, what in counted:
            totals[number] += counts[number]
            if totals[number] > limit:
                return too_many_items(field, limit, what)
        if (refused := _other_fields(counts)) is not None:
            return refused
    return None


def _other_fields(counts: Mapping[int, int]) -> CoordinatorError | None:
    if counts[OTHER_FIELDS] <= MAX_OTHER_FIELDS:
        return None
    return InvalidArgument(
        "request",
        f"more than {MAX_OTHER_FIELDS} fields besides the repeated ones; send each field once",
        reason="TOO_MANY_FIELDS",
    )


class _Refused:
    """Stands in for a request refused before parsing, so the call can say why."""

    def __init__(self, error: CoordinatorError) -> None:
        self.error = error


def refusing_deserializer(
    limit: RequestLimit, parse: Callable[[bytes], Any] | None
) -> Callable[[bytes], Any]:
    """``parse``, run only on bytes within ``limit``; a ``_Refused`` for the others."""

    def deserialize(data: bytes) -> Any:
        if len(data) > limit.max_bytes:
            return _Refused(
                ResourceExhausted(
                    f"the request is {len(data)} bytes, over this method's limit of {limit.max_bytes} "
                    "bytes; see docs/limits.md",
                    reason="REQUEST_TOO_LARGE",
                    metadata={"size_bytes": len(data), "limit_bytes": limit.max_bytes},
                )
            )
        if limit.check is not None:
            try:
                refused = limit.check(memoryview(data))
            except WireError as exc:
                refused = _malformed(exc)
            if refused is not None:
                return _Refused(refused)
        if parse is None:
            return data
        try:
            return parse(data)
        except Exception as exc:  # gRPC would answer INTERNAL for a parse failure
            return _Refused(_malformed(exc))

    return deserialize


def _malformed(error: Exception) -> InvalidArgument:
    return InvalidArgument(
        "request",
        f"the message is not a valid protobuf message of this RPC's request type ({error})",
        reason=MALFORMED_REASON,
    )


class IngressInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Gives every method's request deserializer its ``RequestLimit``
    (``SMALL_REQUEST_BYTES`` for methods ``limits`` does not name) and ends a refused
    call with its error."""

    def __init__(self, limits: Mapping[str, RequestLimit]) -> None:
        self.limits = dict(limits)
        self.default = RequestLimit(SMALL_REQUEST_BYTES)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        limit = self.limits.get(handler_call_details.method, self.default)
        options = {
            "request_deserializer": refusing_deserializer(limit, handler.request_deserializer),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(_unary_request(handler.unary_unary), **options)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(_unary_request(handler.unary_stream), **options)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(_stream_request(handler.stream_unary), **options)
        return grpc.stream_stream_rpc_method_handler(_stream_request(handler.stream_stream), **options)


def _unary_request(behaviour: Any) -> Any:
    """``behaviour`` (a coroutine or an async generator) for requests that passed."""
    if inspect.isasyncgenfunction(behaviour):

        async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            if isinstance(request, _Refused):
                await abort(context, request.error)
            async for response in behaviour(request, context):
                yield response

        return streaming

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, _Refused):
            await abort(context, request.error)
        return await behaviour(request, context)

    return unary


def _stream_request(behaviour: Any) -> Any:
    """``behaviour`` reading only requests that passed: a refused one raises its error
    where the servicer reads it, which ends the call with that error's status."""

    async def checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, _Refused):
                raise request.error
            yield request

    if inspect.isasyncgenfunction(behaviour):

        async def streaming(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            async for response in behaviour(checked(requests), context):
                yield response

        return streaming

    async def unary(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return await behaviour(checked(requests), context)

    return unary
