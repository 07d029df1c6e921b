"""Riding out a database blip while the coordinator starts: a PostgreSQL connection
that was made and then lost (a terminated backend, a server starting up, shutting down
or recovering) is tried again with growing pauses for a bounded time, instead of
ending the process with a message that blames the URL. Input-like failures (a URL, a
database, a role, a password, a SQLite file, a schema that is not current) are raised
at once: waiting cannot fix them."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from coordinator.app.offline import database_failure
from coordinator.config import ConfigError
from coordinator.store import transient_at_start

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 4.0
MAX_WAIT_S = 3600.0
"""The longest wait allowed: a start that waits longer is stuck; an orchestrator should
see it fail and restart it."""


class DatabaseKeptFailing(Exception):
    """The database was reachable, but its connections kept being lost for the whole
    start-up wait."""

    def __init__(self, waited_s: float, attempts: int, last: str) -> None:
        super().__init__(
            f"the database was reachable but its connection kept failing for {waited_s:.1f} s "
            f"({attempts} {'try' if attempts == 1 else 'tries'}; last: {last})"
        )
        self.waited_s = waited_s
        self.attempts = attempts
        self.last = last


def check_wait(wait_s: float) -> None:
    """Refuses a wait that is negative, not a number or over ``MAX_WAIT_S``."""
    if isinstance(wait_s, bool) or not (0 <= wait_s <= MAX_WAIT_S) or math.isnan(wait_s):
        raise ConfigError(
            f"startup_database_wait_s must be between 0 and {MAX_WAIT_S:g} seconds, got {wait_s!r}"
        )


async def open_riding_out_blips(open_once: Callable[[float], Awaitable[T]], wait_s: float) -> T:
    """Calls ``open_once(seconds left)`` until it succeeds, trying again after a
    transient database failure until ``wait_s`` has passed; then raises
    ``DatabaseKeptFailing``. ``open_once`` closes what it opened when it fails."""
    check_wait(wait_s)
    started = time.monotonic()
    deadline = started + wait_s
    pause_s = FIRST_PAUSE_S
    attempt = 0
    while True:
        attempt += 1
        try:
            return await open_once(max(0.0, deadline - time.monotonic()))
        except Exception as exc:
            if not transient_at_start(exc):
                raise
            said = database_failure(exc) or type(exc).__name__
            if time.monotonic() + pause_s > deadline:
                raise DatabaseKeptFailing(time.monotonic() - started, attempt, said) from exc
            log.warning(
                "starting: the database connection failed (try %d: %s); trying again in %.2f s",
                attempt,
                said,
                pause_s,
            )
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, MAX_PAUSE_S)
