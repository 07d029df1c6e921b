"""Where the coordinator's blocking database work runs, so the event loop never waits on
it: one policy for every caller (servicers, dispatcher, background loops, dashboard).

Writes go to the writer: one thread on SQLite, which has a single writer anyway (a queue
in order beats threads contending for its lock), a few on PostgreSQL. Reads go to a
pool of their own, so a slow read never delays a write.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

POSTGRES_WRITE_THREADS = 4
READ_THREADS = 4


class Executors:
    def __init__(self, *, postgres: bool) -> None:
        self.writer = ThreadPoolExecutor(
            POSTGRES_WRITE_THREADS if postgres else 1, thread_name_prefix="runwick-write"
        )
        self.reader = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="runwick-read")

    async def write(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs ``function`` on the writer and waits for it without blocking the loop."""
        return await self.submit_write(function, *args, **kwargs)

    def submit_write(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        """Hands ``function`` to the writer now (``write`` does so only once awaited); the
        future resolves with its result on the running loop."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self.writer, functools.partial(function, *args, **kwargs))

    async def read(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.reader, functools.partial(function, *args, **kwargs))

    def shutdown(self) -> None:
        self.writer.shutdown(wait=True)
        self.reader.shutdown(wait=False, cancel_futures=True)
