"""Transactional enqueue: jobs written into an outbox table in the application's own
database transaction, and a relay that forwards committed rows to the coordinator.

- ``Outbox`` (SQLAlchemy Core ``Connection`` or ORM ``Session``) writes jobs;
  ``outbox_table()`` is the table, ``worker_sdk.outbox.alembic`` creates it in a
  migration, ``worker_sdk.outbox.django`` is the same for Django.
- ``OutboxRelay`` sends committed rows in batches, each row's idempotency key making
  every send of it name the same job, and deletes them once acknowledged;
  ``runwick outbox relay`` runs one as a command.

Needs SQLAlchemy (``pip install "runwick[outbox]"``), except ``worker_sdk.outbox.django``
which writes with Django's own connection. The base ``worker_sdk`` never imports this
package. Names are loaded on first use, so importing the Django app does not need
SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker_sdk.outbox._config import RelayConfig
    from worker_sdk.outbox._relay import OutboxDatabaseError, OutboxRelay
    from worker_sdk.outbox._rows import (
        DEFAULT_NOTIFY_CHANNEL,
        DEFAULT_TABLE_NAME,
        OutboxEncoder,
        OutboxLimits,
        OutboxRow,
    )
    from worker_sdk.outbox._sqlalchemy import Outbox
    from worker_sdk.outbox._table import outbox_table

__all__ = [
    "DEFAULT_NOTIFY_CHANNEL",
    "DEFAULT_TABLE_NAME",
    "Outbox",
    "OutboxDatabaseError",
    "OutboxEncoder",
    "OutboxLimits",
    "OutboxRelay",
    "OutboxRow",
    "RelayConfig",
    "outbox_table",
]

_HOMES = {
    "DEFAULT_NOTIFY_CHANNEL": "_rows",
    "DEFAULT_TABLE_NAME": "_rows",
    "OutboxEncoder": "_rows",
    "OutboxLimits": "_rows",
    "OutboxRow": "_rows",
    "Outbox": "_sqlalchemy",
    "OutboxDatabaseError": "_relay",
    "OutboxRelay": "_relay",
    "RelayConfig": "_config",
    "outbox_table": "_table",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
