"""Errors the coordinator raises to its clients; ``api.errors`` maps each to a status.

CoordinatorError
├── InvalidArgument      a request field is wrong (names the field, and the index in a batch)
│   └── JobOutputTooLarge  a success write's output is over ``max_output_bytes`` (docs/limits.md)
├── NotFound             the job or attempt does not exist
├── AlreadyExists        the thing to create exists already (a client-chosen job ID, a schedule)
├── FailedPrecondition   the job is in the wrong state for the operation
├── PermissionDenied     the caller may not act on this object (another worker's attempt)
└── Unavailable          the database cannot be reached right now

Every error carries a machine-readable ``reason`` (UPPER_SNAKE_CASE, the
``google.rpc.ErrorInfo`` reason; each class has a default) and string ``metadata``;
``InvalidArgument`` also names the offending ``field`` (a ``google.rpc.BadRequest``
field violation). The message itself is for a person and says what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class CoordinatorError(Exception):
    """Root of the errors a client may be told about."""

    default_reason: ClassVar[str] = "COORDINATOR_ERROR"

    def __init__(
        self, message: str = "", *, reason: str | None = None, metadata: Mapping[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.reason: str = reason or self.default_reason
        """Machine-readable cause (``google.rpc.ErrorInfo.reason``)."""
        self.metadata: dict[str, str] = {key: str(value) for key, value in (metadata or {}).items()}
        """Facts about the error a program may use (``google.rpc.ErrorInfo.metadata``)."""


class InvalidArgument(CoordinatorError):
    """A request field is wrong; ``field`` is its path (``jobs[2].payload`` in a batch)."""

    default_reason = "INVALID_ARGUMENT"

    def __init__(
        self,
        field: str,
        message: str,
        *,
        index: int | None = None,
        reason: str | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> None:
        where = f"jobs[{index}].{field}" if index is not None else field
        details = dict(metadata or {})
        if index is not None:
            details.setdefault("index", index)
        super().__init__(f"{where}: {message}", reason=reason, metadata=details)
        self.field = where
        self.description = message
        self.index = index


class JobOutputTooLarge(InvalidArgument):
    """docs/limits.md: a success write whose output is over ``max_output_bytes``; nothing is written."""

    default_reason = "OUTPUT_TOO_LARGE"

    def __init__(self, job_id: str, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            "result.output",
            f"job {job_id}: output is {size_bytes} bytes, over the limit of {limit_bytes} bytes "
            "(max_output_bytes); store large results elsewhere and return a reference to them",
            metadata={"job_id": job_id, "size_bytes": size_bytes, "limit_bytes": limit_bytes},
        )
        self.job_id = job_id
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class NotFound(CoordinatorError):
    default_reason = "NOT_FOUND"


class AlreadyExists(CoordinatorError):
    default_reason = "ALREADY_EXISTS"


class FailedPrecondition(CoordinatorError):
    default_reason = "FAILED_PRECONDITION"


class PermissionDenied(CoordinatorError):
    default_reason = "PERMISSION_DENIED"


class Unavailable(CoordinatorError):
    default_reason = "UNAVAILABLE"


class ResourceExhausted(CoordinatorError):
    """A size, concurrency or deployment-wide cap is reached (a request over the API's
    size or call caps, docs/security.md; ``max_queues``); the message names it."""

    default_reason = "RESOURCE_EXHAUSTED"
