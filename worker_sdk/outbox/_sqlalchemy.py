"""Writing jobs into the outbox with SQLAlchemy, in the caller's own transaction: a Core
``Connection`` or an ORM ``Session`` alike. Nothing is committed here; the jobs leave
for the coordinator only if, and once, the caller's transaction commits."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Connection, MetaData, Table, func, insert, select
from sqlalchemy.orm import Session

from worker_sdk._client_base import EnqueueItem
from worker_sdk.outbox._rows import DEFAULT_NOTIFY_CHANNEL, DEFAULT_TABLE_NAME, OutboxEncoder, OutboxLimits
from worker_sdk.outbox._table import outbox_table


class Outbox(OutboxEncoder):
    """Enqueues jobs through an outbox table in the application's database.

    ``enqueue`` and ``enqueue_many`` take the same arguments as ``Client``'s, plus the
    connection or session whose transaction the rows join. Job settings resolve as a
    client's do (``job_defaults``, ``configure_job``, the ``@job`` declaration), at write
    time. On PostgreSQL each write also notifies ``notify_channel`` (delivered at commit),
    which wakes the relays at once; elsewhere relays poll.

    Args:
        table: The outbox table; by default ``outbox_table(metadata, table_name)``.
        metadata: Where the default table is defined (a new ``MetaData`` when None).
        table_name: The default table's name.
        limits: What a row may hold (the coordinator's limits at their defaults).
        notify_channel: The PostgreSQL channel relays listen on.
    """

    def __init__(
        self,
        table: Table | None = None,
        *,
        metadata: MetaData | None = None,
        table_name: str = DEFAULT_TABLE_NAME,
        limits: OutboxLimits | None = None,
        notify_channel: str = DEFAULT_NOTIFY_CHANNEL,
    ) -> None:
        super().__init__(limits)
        self.table = table if table is not None else outbox_table(metadata, table_name)
        self.notify_channel = notify_channel

    def enqueue(
        self,
        bind: Connection | Session,
        payload: object,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        parents: Sequence[str] = (),
        idempotency_key: str | None = None,
        unique_key: str | None = None,
        job_id: str | None = None,
    ) -> str:
        """Writes one job into the outbox in ``bind``'s transaction and returns its
        idempotency key (``idempotency_key``, or one the outbox made).

        Raises:
            ArgumentError: The job would be refused by the coordinator (an unknown type,
                a bad name or setting, a payload over the limit, ...); nothing is written.
        """
        item = EnqueueItem(
            payload, run_at, priority, queue, parents, idempotency_key, job_id=job_id, unique_key=unique_key
        )
        return self.enqueue_many(bind, [item])[0]

    def enqueue_many(self, bind: Connection | Session, items: Iterable[EnqueueItem | object]) -> list[str]:
        """Writes the jobs, in order, in ``bind``'s transaction; all or nothing. Returns
        their idempotency keys. Raises ``ArgumentError`` as ``enqueue`` does, naming the
        item's index, and then writes nothing."""
        rows = self.rows(items)
        bind.execute(
            insert(self.table),
            [
                {"job": row.job, "idempotency_key": row.idempotency_key, "created_at_ms": row.created_at_ms}
                for row in rows
            ],
        )
        if _dialect_name(bind) == "postgresql":
            # Sent at commit, and not at all on rollback: exactly when the rows appear.
            bind.execute(select(func.pg_notify(self.notify_channel, "")))
        return [row.idempotency_key for row in rows]


def _dialect_name(bind: Connection | Session) -> str:
    if isinstance(bind, Session):
        return bind.get_bind().dialect.name
    return bind.dialect.name
