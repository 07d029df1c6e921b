"""How an idle relay learns that rows were committed: PostgreSQL's LISTEN/NOTIFY (each
outbox write notifies at commit), or, on other databases, a poll interval.

Either waits on a ``threading.Event`` too, so ``stop()`` ends a wait at once. A LISTEN
connection that breaks (the database restarted) is dropped and opened again on the next
wait; until then the relay polls, so a lost notification costs at most one interval.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from sqlalchemy import Engine

_log = logging.getLogger(__name__)

LISTEN_SLICE_S = 0.05
"""A LISTEN wait checks the stop event at least this often."""
RELISTEN_S = 1.0
"""After a LISTEN connection broke: how soon to look for rows and listen again."""
DRAIN_S = 0.0001
"""How long to look for more notifications already queued after one (psycopg reads a
timeout of 0 as none at all)."""


class Wakeup(Protocol):
    def wait(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for news; True when rows may have arrived."""

    def close(self) -> None: ...


class PollWakeup:
    """Sleeps the poll interval (rows may have arrived at any time, so it says True)."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def wait(self, timeout_s: float) -> bool:
        self._stop.wait(timeout_s)
        return True

    def close(self) -> None:
        pass


class PgListenWakeup:
    """LISTEN on ``channel`` over a connection of its own (outside the engine's pool,
    in autocommit: a notification is delivered between transactions only)."""

    def __init__(self, engine: Engine, channel: str, stop: threading.Event) -> None:
        self._engine = engine
        self._channel = channel
        self._stop = stop
        self._connection: Any = None
        self.listen()

    def listen(self) -> None:
        raw = self._engine.raw_connection()
        driver: Any = raw.driver_connection
        raw.detach()  # closed for good with this listener, never handed to another user
        driver.autocommit = True
        driver.execute(f'LISTEN "{self._channel}"')
        self._connection = driver

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        try:
            if self._connection is None:
                self.listen()
            while not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                slice_s = min(remaining, LISTEN_SLICE_S)
                if any(True for _ in self._connection.notifies(timeout=slice_s, stop_after=1)):
                    # Many commits send many notifications: one batch read serves them
                    # all. (Drained after the first generator ended: it holds a lock.)
                    for _ in self._connection.notifies(timeout=DRAIN_S):
                        pass
                    return True
            return False
        except Exception as exc:  # a broken connection: poll until it is back
            _log.warning("outbox relay: LISTEN connection failed (%s); polling until it is back", exc)
            self.close()
            self._stop.wait(min(timeout_s, RELISTEN_S))
            return True

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:  # closing a broken connection: nothing more to do
                _log.debug("outbox relay: closing the LISTEN connection failed", exc_info=True)


def wakeup_for(engine: Engine, channel: str, stop: threading.Event) -> Wakeup:
    """LISTEN/NOTIFY on PostgreSQL through psycopg (3), a poll interval elsewhere."""
    if engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg":
        return PgListenWakeup(engine, channel, stop)
    return PollWakeup(stop)
