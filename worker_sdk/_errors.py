"""The SDK's exceptions, and the one place where ``grpc.RpcError`` becomes one of them.

Exception tree::

    RunwickError                      root of everything the SDK raises
    ├── ArgumentError (ValueError)    bad input, found by the SDK or INVALID_ARGUMENT
    │   └── PayloadTooLarge           a payload over the coordinator's max_payload_bytes
    ├── JobNotFound                   NOT_FOUND
    ├── FailedPrecondition            FAILED_PRECONDITION (wrong state for the operation)
    ├── AlreadyExists                 ALREADY_EXISTS
    ├── Unauthenticated               UNAUTHENTICATED (missing or bad token)
    ├── PermissionDenied              PERMISSION_DENIED (token lacks the scope)
    ├── CoordinatorUnavailable        UNAVAILABLE, DEADLINE_EXCEEDED (safe to retry later)
    ├── CoordinatorError              any other status the coordinator answered with
    │   └── MessageTooLarge           RESOURCE_EXHAUSTED (a message over a gRPC size limit)
    ├── PermanentJobFailure           raised by a handler: fail the job, no retry (R-5)
    └── JobCancelled                  raised by ``JobContext.raise_if_cancelled()``

``PayloadUndecodable`` (internal, under ``RunwickError``) marks a payload that cannot be
decoded, upgraded or constructed; the worker reports it as ``payload_undecodable``.

Errors from the coordinator carry its machine-readable details: ``reason`` (the
``google.rpc.ErrorInfo`` reason, e.g. ``PAYLOAD_TOO_LARGE``), ``metadata`` and
``field_violations`` (``google.rpc.BadRequest``), read from the
``grpc-status-details-bin`` trailer with googleapis-common-protos.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

_DETAILS_KEY = "grpc-status-details-bin"


@dataclass(frozen=True, slots=True)
class FieldViolation:
    """One bad field of a request, as the coordinator named it.

    Attributes:
        field: Its path, e.g. ``jobs[2].payload`` (index 2 of a batch).
        description: What is wrong with it.
    """

    field: str
    description: str


class RunwickError(Exception):
    """Root of every exception the Runwick SDK raises.

    Attributes:
        status_code: The gRPC status the coordinator answered with, or None when the
            error was found by the SDK itself.
        reason: The coordinator's machine-readable reason (``PAYLOAD_TOO_LARGE``,
            ``JOB_NOT_FOUND``, ``INVALID_ID``...), or None.
        metadata: Facts about the error (e.g. ``size_bytes``, ``limit_bytes``).
        field_violations: The request fields the coordinator rejected.
    """

    status_code: grpc.StatusCode | None
    reason: str | None
    metadata: Mapping[str, str]
    field_violations: tuple[FieldViolation, ...]

    def __init__(
        self,
        message: str,
        *,
        status_code: grpc.StatusCode | None = None,
        reason: str | None = None,
        metadata: Mapping[str, str] | None = None,
        field_violations: tuple[FieldViolation, ...] = (),
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason
        self.metadata = MappingProxyType(dict(metadata or {}))
        self.field_violations = field_violations


class ArgumentError(RunwickError, ValueError):
    """An argument is invalid: checked by the SDK, or rejected with INVALID_ARGUMENT.

    ``field_violations`` names the fields the coordinator rejected and ``reason`` why.
    """


class PayloadTooLarge(ArgumentError):
    """A job's payload is over the coordinator's ``max_payload_bytes``; no job was created.

    Store the data elsewhere (a blob store, a table) and enqueue a reference to it.

    Attributes:
        wire_name: The job type whose payload was too large.
        size_bytes: The payload's size.
        limit_bytes: The coordinator's limit.
        index: The job's index in the batch (0 for a single enqueue), or None.
    """

    @property
    def wire_name(self) -> str:
        """The job type whose payload was too large."""
        return self.metadata.get("wire_name", "")

    @property
    def size_bytes(self) -> int | None:
        """The payload's size in bytes, or None when the coordinator did not say."""
        return _int(self.metadata.get("size_bytes"))

    @property
    def limit_bytes(self) -> int | None:
        """The coordinator's ``max_payload_bytes``, or None when it did not say."""
        return _int(self.metadata.get("limit_bytes"))

    @property
    def index(self) -> int | None:
        """The job's index in the batch (0 for a single enqueue), or None."""
        return _int(self.metadata.get("index"))


class JobNotFound(RunwickError):
    """The job (or attempt) does not exist, or retention already removed it."""


class FailedPrecondition(RunwickError):
    """The operation does not fit the job's current state (e.g. retrying a running job)."""


class AlreadyExists(RunwickError):
    """The thing to create exists already."""


class Unauthenticated(RunwickError):
    """The coordinator did not accept the token (missing, unknown or revoked)."""


class PermissionDenied(RunwickError):
    """The token is valid but lacks the scope the call needs (R-21)."""


class CoordinatorUnavailable(RunwickError):
    """The coordinator could not be reached or did not answer in time; retry later."""


class CoordinatorError(RunwickError):
    """The coordinator answered with a status that has no more specific exception."""


class MessageTooLarge(CoordinatorError):
    """A gRPC message was over a size limit (RESOURCE_EXHAUSTED): the request, or the
    answer, was far larger than the coordinator's bounds allow."""


class QueueLimitReached(CoordinatorError):
    """An enqueue would have created a queue past the coordinator's ``max_queues``
    (RESOURCE_EXHAUSTED, reason ``QUEUE_LIMIT_REACHED``); nothing was enqueued."""


class PermanentJobFailure(RunwickError):
    """Raised by a handler to fail its job permanently: no retry (R-5).

    Args:
        code: The failure code, following the name grammar ``A-Z a-z 0-9 . _ -``,
            1-128 characters (other characters are replaced by ``_``).
        message: A human-readable explanation. It is stored with the attempt and shown
            only through an audited reveal, so it may name the offending input.
    """

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message


class JobCancelled(RunwickError):
    """Raised by ``JobContext.raise_if_cancelled()`` once the run was cancelled.

    The exception type does not decide the outcome: the cancellation's cause does
    (``timeout``, ``cancelled``, ``shutdown`` or ``lost``).
    """

    def __init__(self, cause: str) -> None:
        super().__init__(f"job run cancelled ({cause})")
        self.cause = cause


class PayloadUndecodable(RunwickError):
    """A payload could not be decoded, upgraded or constructed (internal)."""


_BY_STATUS: dict[grpc.StatusCode, type[RunwickError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: ArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: ArgumentError,
    grpc.StatusCode.NOT_FOUND: JobNotFound,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: CoordinatorUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: CoordinatorUnavailable,
    grpc.StatusCode.RESOURCE_EXHAUSTED: MessageTooLarge,
}
_BY_REASON: dict[str, type[RunwickError]] = {
    "PAYLOAD_TOO_LARGE": PayloadTooLarge,
}
_RESOURCE_BY_REASON: dict[str, type[RunwickError]] = {
    "QUEUE_LIMIT_REACHED": QueueLimitReached,
}
"""RESOURCE_EXHAUSTED that is a limit of the deployment, not of a message's size."""
_RESOURCE_ADVICE = (
    "; keep payloads small (store bulk data elsewhere and enqueue a reference to it) "
    "or send fewer jobs per enqueue_many call"
)


def rpc_status(error: grpc.RpcError) -> grpc.StatusCode:
    """The status code of a failed call (UNKNOWN when the error carries none)."""
    code = getattr(error, "code", None)
    status = code() if callable(code) else None
    return status if isinstance(status, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def translate_rpc_error(error: grpc.RpcError) -> RunwickError:
    """Returns the SDK exception for a failed gRPC call (the one translation table)."""
    status = rpc_status(error)
    details_fn = getattr(error, "details", None)
    details = details_fn() if callable(details_fn) else None
    message = details if isinstance(details, str) and details else status.name
    reason, metadata, violations = _rich_details(error)
    kind = _BY_STATUS.get(status, CoordinatorError)
    specific = _BY_REASON.get(reason or "")
    if specific is not None and issubclass(specific, kind):
        kind = specific
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED and reason in _RESOURCE_BY_REASON:
        kind = _RESOURCE_BY_REASON[reason]
    if status is grpc.StatusCode.RESOURCE_EXHAUSTED and reason is None:
        message += _RESOURCE_ADVICE
    return kind(message, status_code=status, reason=reason, metadata=metadata, field_violations=violations)


def _rich_details(error: grpc.RpcError) -> tuple[str | None, dict[str, str], tuple[FieldViolation, ...]]:
    """ErrorInfo and BadRequest from the ``grpc-status-details-bin`` trailer, if any.

    Tolerates anything: a missing or malformed trailer yields no details.
    """
    reason: str | None = None
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    raw = _trailer(error, _DETAILS_KEY)
    if raw is None:
        return reason, metadata, ()
    try:
        status = status_pb2.Status.FromString(raw)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason = info.reason or None
                metadata.update(info.metadata)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
    except Exception:  # a malformed trailer must not hide the status itself
        return None, {}, ()
    return reason, metadata, tuple(violations)


def _trailer(error: grpc.RpcError, key: str) -> bytes | None:
    trailing = getattr(error, "trailing_metadata", None)
    try:
        items: Any = trailing() if callable(trailing) else None
    except Exception:
        return None
    for item in items or ():
        name, value = item
        if name == key and isinstance(value, bytes):
            return value
    return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@contextlib.contextmanager
def translated_rpc_errors() -> Iterator[None]:
    """Re-raises any ``grpc.RpcError`` in the block as its SDK exception.

    Works around awaited calls too: ``with translated_rpc_errors(): await stub.X(...)``.
    """
    try:
        yield
    except grpc.RpcError as error:
        raise translate_rpc_error(error) from error
