"""``python manage.py runwick_worker``: the orders worker as a process of its own; SIGTERM
or Ctrl-C drains it (R-12)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from orders.jobs import worker


class Command(BaseCommand):
    help = "Run the Runwick worker of the orders app until SIGTERM or Ctrl-C."

    def handle(self, *args: Any, **options: Any) -> None:
        worker.run()
