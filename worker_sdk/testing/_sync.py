"""``Coordinator``: the test coordinator for plain (sync) tests.

An ``AsyncCoordinator`` on an event loop of its own, on a thread of its own; each call
runs there and returns its result (or raises its error) here. Async handlers run on
that loop, sync ones on the worker's thread pool, as in a ``BackgroundWorker``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from worker_sdk._client import Client
from worker_sdk._info import AttemptInfo, JobInfo, JobState
from worker_sdk._middleware import Middleware
from worker_sdk._worker import Worker
from worker_sdk.testing._coordinator import DEFAULT_START, AsyncCoordinator

H = TypeVar("H", bound=Callable[..., Any])
T = TypeVar("T")


class Coordinator:
    """A real coordinator on a virtual clock, and a worker for your handlers.

    ``with Coordinator() as coordinator:`` starts it; register handlers with
    ``@coordinator.handler(PayloadType)`` (or ``include(worker)``), enqueue with
    ``coordinator.client``, then ``run_until_idle()`` and ``advance(timedelta)``.
    The arguments are ``AsyncCoordinator``'s.
    """

    def __init__(
        self,
        *,
        start: datetime = DEFAULT_START,
        lease: timedelta = timedelta(seconds=60),
        concurrency: int = 8,
        queues: Sequence[str] | None = None,
        idle_timeout: timedelta = timedelta(seconds=10),
        blocked_after: timedelta = timedelta(seconds=1),
        database_path: str | Path | None = None,
    ) -> None:
        self._inner = AsyncCoordinator(
            start=start,
            lease=lease,
            concurrency=concurrency,
            queues=queues,
            idle_timeout=idle_timeout,
            blocked_after=blocked_after,
            database_path=database_path,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Client | None = None

    def start(self) -> None:
        """Starts the loop's thread and the coordinator on it."""
        if self._loop is not None:
            raise RuntimeError("the test coordinator already started")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="runwick-test-coordinator", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            self._call(self._inner.start())
        except BaseException:
            self._end_loop()
            raise
        self._client = Client(self._inner.target)

    def close(self) -> None:
        """Stops the worker and the coordinator, then the loop's thread."""
        if self._loop is None:
            return
        try:
            if self._client is not None:
                self._client.close()
            self._call(self._inner.close())
        finally:
            self._client = None
            self._end_loop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def client(self) -> Client:
        """A ``Client`` bound to this coordinator."""
        if self._client is None:
            raise RuntimeError("start the test coordinator first (with Coordinator() as ...)")
        return self._client

    @property
    def target(self) -> str:
        """The coordinator's address, for other clients or workers."""
        return self._inner.target

    @property
    def now(self) -> datetime:
        """The virtual clock's time, in UTC."""
        return self._inner.now

    def handler(self, payload_type: type[Any]) -> Callable[[H], H]:
        """Registers the decorated function as the handler of a ``@job`` type."""
        return self._inner.handler(payload_type)

    def use(self, middleware: Middleware) -> None:
        """Adds middleware around every handler."""
        self._inner.use(middleware)

    def include(self, worker: Worker) -> None:
        """Takes the handlers and middleware of an application's ``Worker``."""
        self._inner.include(worker)

    def advance(self, delta: timedelta) -> None:
        """Moves the virtual clock and every timer (``AsyncCoordinator.advance``)."""
        self._call(self._inner.advance(delta))

    def run_until_idle(self, within: timedelta | None = None) -> None:
        """Runs handlers until nothing is runnable now (``AsyncCoordinator.run_until_idle``)."""
        self._call(self._inner.run_until_idle(within))

    def crash_worker(self) -> None:
        """Ends the worker as ``kill -9`` would (``AsyncCoordinator.crash_worker``)."""
        self._call(self._inner.crash_worker())

    def job(self, job_id: str) -> JobInfo:
        """The job with its output, parents and children."""
        return self.client.get(job_id)

    def jobs(
        self, *, queue: str | None = None, state: JobState | str | None = None, wire_name: str | None = None
    ) -> list[JobInfo]:
        """Every matching job, oldest first."""
        return list(self.client.list_jobs(queue=queue, state=state, wire_name=wire_name))[::-1]

    def attempts(self, job_id: str) -> list[AttemptInfo]:
        """The job's attempts, oldest first, with their outcomes."""
        return self.client.attempts(job_id)

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            work.close()
            raise RuntimeError("start the test coordinator first (with Coordinator() as ...)")
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def _end_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
