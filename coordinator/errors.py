"""Errors the coordinator raises to its clients; ``api.errors`` maps each to a status.

CoordinatorError
├── InvalidArgument      a request field is wrong (names the field, and the index in a batch)
├── NotFound             the job or attempt does not exist
├── FailedPrecondition   the job is in the wrong state for the operation
└── Unavailable          the database cannot be reached right now
"""

from __future__ import annotations


class CoordinatorError(Exception):
    """Root of the errors a client may be told about."""


class InvalidArgument(CoordinatorError):
    def __init__(self, field: str, message: str, *, index: int | None = None) -> None:
        where = f"jobs[{index}].{field}" if index is not None else field
        super().__init__(f"{where}: {message}")
        self.field = where
        self.description = message


class NotFound(CoordinatorError):
    pass


class FailedPrecondition(CoordinatorError):
    pass


class Unavailable(CoordinatorError):
    pass
