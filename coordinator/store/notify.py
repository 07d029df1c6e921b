"""The notification half of the store: PostgreSQL LISTEN on the channel that
``Tx.notify_jobs_available`` signals, so every replica hears when any replica made jobs
claimable (docs/scaling.md) and idle workers everywhere get new work without polling."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import psycopg
from sqlalchemy.engine import make_url

from coordinator.store.tx import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

RECONNECT_DELAY_S = 1.0


def libpq_url(sqlalchemy_url: str) -> str:
    """The same database as a plain libpq URL (psycopg does not take SQLAlchemy's)."""
    return make_url(sqlalchemy_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def listen_for_jobs(
    database_url: str,
    on_jobs_available: Callable[[str | None], None],
    on_listening: Callable[[bool], None] = lambda listening: None,
    *,
    own_origin: str | None = None,
) -> None:
    """Calls ``on_jobs_available`` with the origin of every notification but those of
    ``own_origin`` (this replica's store, which woke its own dispatcher already), and
    with None once after each (re)connect, for what was announced while nobody
    listened; ``on_listening`` hears whether the connection is up (while it is not,
    nothing announces other replicas' jobs). Runs until cancelled."""
    url = libpq_url(database_url)
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f'LISTEN "{NOTIFY_CHANNEL}"')
                on_listening(True)
                on_jobs_available(None)
                async for notification in conn.notifies():
                    if own_origin is None or notification.payload != own_origin:
                        on_jobs_available(notification.payload)
        except asyncio.CancelledError:
            on_listening(False)
            raise
        except Exception as exc:
            on_listening(False)
            log.warning("LISTEN connection failed (%s); reconnecting", type(exc).__name__)
            await asyncio.sleep(RECONNECT_DELAY_S)
