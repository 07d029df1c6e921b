"""The outbox table, as a SQLAlchemy Core ``Table`` on the application's ``MetaData``.

Rows are read in ``id`` order, so jobs leave in the order they were written (a parent
written before its child reaches the coordinator first). Rows waiting to be relayed have
``failed_at`` NULL; a row the coordinator refused for good keeps its job with
``failed_at`` and ``error`` set, for a person to look at, and is never sent again.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, LargeBinary, MetaData, String, Table, Text

from worker_sdk.outbox._rows import DEFAULT_TABLE_NAME

MAX_ERROR_CHARS = 2_000
"""The ``error`` column keeps the coordinator's refusal up to this many characters."""
MAX_KEY_CHARS = 300
"""Width of the ``idempotency_key`` column: a key is bounded to 256 at write time."""


def outbox_table(metadata: MetaData | None = None, name: str = DEFAULT_TABLE_NAME) -> Table:
    """The outbox table ``name`` on ``metadata`` (a new ``MetaData`` when None), or the
    one already defined there under that name.

    Columns: ``id`` (ordering, autoincrement), ``job`` (the encoded ``NewJob`` of the
    ``Enqueue`` RPC), ``idempotency_key`` (the job's, for reading; it is in ``job``
    too), ``created_at_ms``, ``failed_at_ms`` and ``error`` (a row refused for good).
    """
    metadata = MetaData() if metadata is None else metadata
    existing = metadata.tables.get(name)
    if existing is not None:
        return existing
    return Table(name, metadata, *outbox_columns(), Index(pending_index_name(name), *PENDING_INDEX_COLUMNS))


PENDING_INDEX_COLUMNS = ("failed_at_ms", "id")
"""The relay's read: pending rows (failed_at_ms NULL) in id order."""


def pending_index_name(table_name: str) -> str:
    return f"ix_{table_name}_pending"


def outbox_columns() -> list[Column[object]]:
    """New ``Column`` objects of the outbox table (a column belongs to one table, so
    the table definition and migrations each take fresh ones)."""
    return [
        # SQLite autoincrements only an INTEGER PRIMARY KEY; elsewhere a 64-bit ID.
        Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
        Column("job", LargeBinary(), nullable=False),
        Column("idempotency_key", String(MAX_KEY_CHARS), nullable=False),
        Column("created_at_ms", BigInteger(), nullable=False),
        Column("failed_at_ms", BigInteger(), nullable=True),
        Column("error", Text(), nullable=True),
    ]
