"""The store's errors. Driver errors become ``StoreError`` in one place (``Store``);
``StoreError`` is an ``Unavailable``, so every layer above reports a database outage as
UNAVAILABLE without translating it again.

Unavailable (coordinator.errors)
└── StoreError          the database failed or refused; the message says which
    ├── WriteConflict   a conditional write matched fewer rows: someone changed the job
    └── DuplicateKey    an insert hit a unique key (an idempotency key raced)
"""

from __future__ import annotations

from coordinator.errors import Unavailable


class StoreError(Unavailable):
    """The database failed or refused; the message says which."""


class WriteConflict(StoreError):
    """A conditional write matched fewer rows than expected: someone changed the job."""


class DuplicateKey(StoreError):
    """An insert hit a unique key (an idempotency key raced with another enqueue)."""
