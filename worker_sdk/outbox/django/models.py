"""The outbox row as a Django model: the same table, columns and index as
``worker_sdk.outbox.outbox_table()``, so the relay reads what Django wrote."""

from __future__ import annotations

from django.db import models


class OutboxRow(models.Model):
    id = models.BigAutoField(primary_key=True)
    job = models.BinaryField()
    """The encoded ``NewJob`` of the ``Enqueue`` RPC."""
    idempotency_key = models.CharField(max_length=300)
    created_at_ms = models.BigIntegerField()
    failed_at_ms = models.BigIntegerField(null=True)
    error = models.TextField(null=True)

    class Meta:
        app_label = "runwick_outbox"
        db_table = "runwick_outbox"
        indexes = [models.Index(fields=["failed_at_ms", "id"], name="ix_runwick_outbox_pending")]
