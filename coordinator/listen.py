"""PostgreSQL LISTEN: wakes this replica's dispatcher when any replica makes jobs
claimable (SPEC §8), so idle workers everywhere get new work without polling."""

from __future__ import annotations

import asyncio
import logging

import psycopg
from sqlalchemy.engine import make_url

from coordinator.dispatch import Dispatcher
from coordinator.store.store import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

_RECONNECT_DELAY_S = 1.0


def libpq_url(sqlalchemy_url: str) -> str:
    """The same database as a plain libpq URL (psycopg does not take SQLAlchemy's)."""
    return make_url(sqlalchemy_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def listen_for_jobs(database_url: str, dispatcher: Dispatcher) -> None:
    """Runs until cancelled, reconnecting after failures."""
    url = libpq_url(database_url)
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f'LISTEN "{NOTIFY_CHANNEL}"')
                # Anything announced while we were not listening is picked up now.
                dispatcher.jobs_available()
                async for _ in conn.notifies():
                    dispatcher.jobs_available()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("LISTEN connection failed (%s); reconnecting", type(exc).__name__)
            await asyncio.sleep(_RECONNECT_DELAY_S)
