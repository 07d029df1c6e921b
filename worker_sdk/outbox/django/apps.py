"""The Django app that owns the ``runwick_outbox`` table and its migration."""

from __future__ import annotations

from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "worker_sdk.outbox.django"
    label = "runwick_outbox"
    verbose_name = "Runwick outbox"
    default_auto_field = "django.db.models.BigAutoField"
