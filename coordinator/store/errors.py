"""The store's errors. Driver errors become ``StoreError`` in one place (``Store``);
``StoreError`` is an ``Unavailable``, so every layer above reports a database outage as
UNAVAILABLE without translating it again.

Unavailable (coordinator.errors)
└── StoreError          the database failed or refused (reason DATABASE_UNAVAILABLE)
    ├── ConnectionLost  the connection failed before the transaction committed
    ├── WriteConflict   a conditional write matched fewer rows: someone changed the job
    └── DuplicateKey    an insert hit a unique key (an idempotency key raced)

ResourceExhausted (coordinator.errors)
└── QueueLimitReached   an enqueue would create a queue past ``max_queues``

A ``StoreError`` from the database says only that it is unavailable: what the driver
said (server names, ports, ``FATAL: ...``) is logged by the store at WARNING, never
carried to clients.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.errors import ResourceExhausted, Unavailable

DATABASE_UNAVAILABLE = "DATABASE_UNAVAILABLE"
UNAVAILABLE_MESSAGE = "the database is unavailable; try again"


class StoreError(Unavailable):
    """The database failed or refused; clients get ``UNAVAILABLE_MESSAGE``."""

    default_reason = DATABASE_UNAVAILABLE

    def __init__(
        self,
        message: str = UNAVAILABLE_MESSAGE,
        *,
        reason: str | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)


class ConnectionLost(StoreError):
    """The connection to the database failed (a disconnect, a terminated backend, a
    failed connect) before the transaction committed: nothing of it was written, so
    ``Store.transact`` runs the body again on a new connection."""


class WriteConflict(StoreError):
    """A conditional write matched fewer rows than expected: someone changed the job."""

    default_reason = "WRITE_CONFLICT"


class DuplicateKey(StoreError):
    """An insert hit a unique key (an idempotency key raced with another enqueue)."""

    default_reason = "WRITE_CONFLICT"


class QueueLimitReached(ResourceExhausted):
    """An enqueue would create a queue past ``StoreBounds.max_queues``; nothing changed."""

    default_reason = "QUEUE_LIMIT_REACHED"
