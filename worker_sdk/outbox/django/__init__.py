"""The outbox for Django: add ``"worker_sdk.outbox.django"`` to ``INSTALLED_APPS``,
run ``manage.py migrate`` (it creates the ``runwick_outbox`` table), and enqueue inside
your transactions::

    from django.db import transaction
    from worker_sdk.outbox.django import outbox

    with transaction.atomic():
        order = Order.objects.create(...)
        outbox.enqueue(CapturePayment(order.id))

The row is written on the connection ``using`` names (``"default"``), in its current
transaction; it leaves for the coordinator only when that transaction commits. On
PostgreSQL each write notifies the relays at commit. Needs Django only; the relay
(``runwick outbox relay``) reads the same table with SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from worker_sdk._client_base import EnqueueItem
from worker_sdk.outbox._rows import DEFAULT_NOTIFY_CHANNEL, OutboxEncoder, OutboxLimits

__all__ = ["DjangoOutbox", "outbox"]


class DjangoOutbox(OutboxEncoder):
    """Writes jobs into the ``runwick_outbox`` table through Django's ORM; the same
    arguments and checks as ``worker_sdk.outbox.Outbox``, with ``using`` (the database
    alias) in place of a connection."""

    def __init__(
        self, limits: OutboxLimits | None = None, notify_channel: str = DEFAULT_NOTIFY_CHANNEL
    ) -> None:
        super().__init__(limits)
        self.notify_channel = notify_channel

    def enqueue(
        self,
        payload: object,
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        queue: str | None = None,
        parents: Sequence[str] = (),
        idempotency_key: str | None = None,
        unique_key: str | None = None,
        job_id: str | None = None,
        using: str = "default",
    ) -> str:
        """Writes one job in the current transaction of ``using``; returns its
        idempotency key. Raises ``ArgumentError`` (nothing written) for a job the
        coordinator would refuse."""
        item = EnqueueItem(
            payload, run_at, priority, queue, parents, idempotency_key, job_id=job_id, unique_key=unique_key
        )
        return self.enqueue_many([item], using=using)[0]

    def enqueue_many(self, items: Iterable[EnqueueItem | object], *, using: str = "default") -> list[str]:
        """Writes the jobs, in order, all or nothing; returns their idempotency keys."""
        from django.db import connections

        from worker_sdk.outbox.django.models import OutboxRow

        rows = self.rows(items)
        OutboxRow.objects.using(using).bulk_create(
            [
                OutboxRow(job=row.job, idempotency_key=row.idempotency_key, created_at_ms=row.created_at_ms)
                for row in rows
            ]
        )
        connection = connections[using]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:  # delivered at commit, not on rollback
                cursor.execute("SELECT pg_notify(%s, '')", [self.notify_channel])
        return [row.idempotency_key for row in rows]


outbox = DjangoOutbox()
"""The default writer: the coordinator's default limits, the default channel."""
