"""Two ways to run the orders app's Runwick worker:

- ``python manage.py runwick_worker``: a process of its own (the management command);
- inside the web processes: with ``RUNWICK_WORKER_IN_PROCESS=1``, ``ready()`` starts it
  on a thread of its own in every process that loads the app — under gunicorn (without
  ``--preload``) each worker process, after the fork. It drains when the process exits.

The variable keeps other commands (``migrate``, ``shell``) from starting a worker.
"""

from __future__ import annotations

import os

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"

    def ready(self) -> None:
        if os.environ.get("RUNWICK_WORKER_IN_PROCESS") == "1":
            from orders.jobs import worker

            worker.start_in_background()
