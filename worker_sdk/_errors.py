"""The SDK's exceptions, and the one place where ``grpc.RpcError`` becomes one of them.

Exception tree::

    RunwickError                      root of everything the SDK raises
    ├── ArgumentError (ValueError)    bad input, found by the SDK or INVALID_ARGUMENT
    ├── JobNotFound                   NOT_FOUND
    ├── FailedPrecondition            FAILED_PRECONDITION (wrong state for the operation)
    ├── AlreadyExists                 ALREADY_EXISTS
    ├── Unauthenticated               UNAUTHENTICATED (missing or bad token)
    ├── PermissionDenied              PERMISSION_DENIED (token lacks the scope)
    ├── CoordinatorUnavailable        UNAVAILABLE, DEADLINE_EXCEEDED (safe to retry later)
    ├── CoordinatorError              any other status the coordinator answered with
    ├── PermanentJobFailure           raised by a handler: fail the job, no retry (R-5)
    └── JobCancelled                  raised by ``JobContext.raise_if_cancelled()``

``PayloadUndecodable`` (internal, under ``RunwickError``) marks a payload that cannot be
decoded, upgraded or constructed; the worker reports it as ``payload_undecodable``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc


class RunwickError(Exception):
    """Root of every exception the Runwick SDK raises.

    Attributes:
        status_code: The gRPC status the coordinator answered with, or None when the
            error was found by the SDK itself.
    """

    status_code: grpc.StatusCode | None

    def __init__(self, message: str, *, status_code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ArgumentError(RunwickError, ValueError):
    """An argument is invalid: checked by the SDK, or rejected with INVALID_ARGUMENT."""


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
}


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
    return _BY_STATUS.get(status, CoordinatorError)(message, status_code=status)


@contextlib.contextmanager
def translated_rpc_errors() -> Iterator[None]:
    """Re-raises any ``grpc.RpcError`` in the block as its SDK exception.

    Works around awaited calls too: ``with translated_rpc_errors(): await stub.X(...)``.
    """
    try:
        yield
    except grpc.RpcError as error:
        raise translate_rpc_error(error) from error
