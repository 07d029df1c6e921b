"""``AsyncCoordinator``: a real coordinator for tests, on the caller's event loop.

It serves gRPC on a free loopback port over a temporary SQLite file, with a virtual
clock that only ``advance`` moves; its worker runs the handlers registered on it with
the same virtual clock for its timers (``worker_sdk._timers.VirtualTimers``). The
coordinator's background loops are set hours apart: ``advance`` runs their passes
itself, at each timer on the way, so what they do happens at once and in order.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from worker_sdk._async_client import AsyncClient
from worker_sdk._info import AttemptInfo, JobInfo, JobState
from worker_sdk._jobs import spec_of
from worker_sdk._middleware import Middleware
from worker_sdk._timers import VirtualTimers
from worker_sdk._worker import Worker
from worker_sdk.testing._database import open_test_store
from worker_sdk.testing._errors import MISSING_EXTRA, NotIdle
from worker_sdk.testing._idle import IdleWatch, WorkerView

try:
    from coordinator.config import CoordinatorConfig
    from coordinator.domain.clock import FakeClock
    from coordinator.domain.states import JobState as StoredState
    from coordinator.process import RunningCoordinator, start_coordinator
except ImportError as missing:  # the base install: no SQLAlchemy, no coordinator
    raise ImportError(MISSING_EXTRA) from missing

H = TypeVar("H", bound=Callable[..., Any])

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
MAX_ADVANCE = timedelta(days=366)
"""The longest single ``advance``: a year of timers is plenty for one step of a test."""
MAX_STOPS = 100_000
"""Timers one ``advance`` stops at, at most (a schedule every second for a day)."""
_HOURS_APART_S = 3600.0
"""Background loops and idle re-checks this far apart never run during a test:
``advance`` runs their passes instead."""
_worker_numbers = itertools.count(1)
_UNUSED_TARGET = "127.0.0.1:1"
"""An address only given to a Worker that checks arguments and never starts."""


class AsyncCoordinator:
    """A coordinator and a worker in this event loop, on a virtual clock.

    Use it as ``async with AsyncCoordinator() as coordinator:``; register handlers
    with ``@coordinator.handler(PayloadType)`` (or take a ``Worker``'s with
    ``include``) before the first ``run_until_idle`` or ``advance``.

    Args:
        start: The virtual clock's first instant (timezone-aware).
        lease: The worker's lease; its heartbeats come every third of it.
        concurrency: Handler runs at once.
        queues: The worker's queues; default: those of the registered job types.
        idle_timeout: How long (real time) ``run_until_idle`` and ``advance`` wait for
            the worker before they raise ``NotIdle``.
        blocked_after: How long (real time) ``advance`` lets a handler it started run
            before it takes the handler to wait on virtual time and moves on; one that
            awaits ``ctx.wait_cancelled()`` is taken so at once.
        database_path: The SQLite file; default one in a temporary directory removed
            at ``close``.

    Raises:
        ValueError: A naive ``start``, or a bound that is not positive.
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
        if start.tzinfo is None:
            raise ValueError(f"start must be timezone-aware (say tzinfo=UTC), got {start!r}")
        for name, value in (("idle_timeout", idle_timeout), ("blocked_after", blocked_after)):
            if value <= timedelta(0):
                raise ValueError(f"{name} must be positive, got {value}")
        # The worker's arguments, checked now as a Worker checks them (it starts later).
        checked_queues = ("default",) if queues is None else queues
        Worker(_UNUSED_TARGET, queues=checked_queues, concurrency=concurrency, lease=lease)
        self.clock = FakeClock(int(start.timestamp() * 1000))
        self._lease = lease
        self._concurrency = concurrency
        self._queues = tuple(queues) if queues is not None else None
        self._idle_timeout_s = idle_timeout.total_seconds()
        self._blocked_after_s = blocked_after.total_seconds()
        self._own_directory: Path | None = None
        self._database_path = Path(database_path) if database_path is not None else None
        self._handlers: list[tuple[type[Any], Callable[..., Any]]] = []
        self._middleware: list[Middleware] = []
        self._run_limits: dict[str, Any] = {}
        """``cancellation_grace`` and ``max_output_bytes`` of an included Worker."""
        self._running: RunningCoordinator | None = None
        self._client: AsyncClient | None = None
        self._worker: Worker | None = None
        self._timers: VirtualTimers | None = None
        self._runs_first_seen: dict[str, float] = {}
        """When ``advance`` first saw each handler running (``IdleWatch.first_seen``)."""

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts the coordinator (its worker starts at the first wait)."""
        if self._running is not None:
            raise RuntimeError("the test coordinator already started")
        if self._database_path is None:
            self._own_directory = Path(tempfile.mkdtemp(prefix="runwick-test-"))
            self._database_path = self._own_directory / "runwick.db"
        config = CoordinatorConfig(
            database_url=f"sqlite:///{self._database_path}",
            port=0,
            maintenance_interval_s=_HOURS_APART_S,
            schedule_interval_s=_HOURS_APART_S,
            idle_interval_s=_HOURS_APART_S,
            idle_recheck_interval_s=_HOURS_APART_S,
            # Days pass in a test: retention would purge finished jobs it still reads.
            retain_succeeded_ms=None,
            retain_failed_ms=None,
            retain_cancelled_ms=None,
            drain_timeout_s=1.0,
        )
        store = await asyncio.to_thread(open_test_store, self._database_path, config.bounds)
        try:
            self._running = await start_coordinator(config, clock=self.clock, store=store)
        except BaseException:
            store.close()
            raise
        self._client = AsyncClient(self.target)

    async def close(self) -> None:
        """Stops the worker (running handlers are interrupted), the coordinator, and
        removes the temporary database."""
        try:
            await self._stop_worker()
            if self._client is not None:
                await self._client.close()
            if self._running is not None:
                await self._running.stop(grace_s=0.5)
        finally:
            self._client = self._running = None
            if self._own_directory is not None:
                shutil.rmtree(self._own_directory, ignore_errors=True)
                self._own_directory = self._database_path = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- what tests read ---------------------------------------------------------------

    @property
    def target(self) -> str:
        """The coordinator's address (``127.0.0.1:port``) for other clients or workers."""
        return self._started().target

    @property
    def client(self) -> AsyncClient:
        """An ``AsyncClient`` bound to this coordinator."""
        if self._client is None:
            raise RuntimeError("start the test coordinator first (async with AsyncCoordinator() as ...)")
        return self._client

    @property
    def now(self) -> datetime:
        """The virtual clock's time, in UTC."""
        return datetime.fromtimestamp(self.clock.now_ms() / 1000, tz=UTC)

    async def job(self, job_id: str) -> JobInfo:
        """The job with its output, parents and children (``AsyncClient.get``)."""
        return await self.client.get(job_id)

    async def jobs(
        self, *, queue: str | None = None, state: JobState | str | None = None, wire_name: str | None = None
    ) -> list[JobInfo]:
        """Every matching job, oldest first."""
        found = [job async for job in self.client.list_jobs(queue=queue, state=state, wire_name=wire_name)]
        return found[::-1]

    async def attempts(self, job_id: str) -> list[AttemptInfo]:
        """The job's attempts, oldest first, with their outcomes."""
        return await self.client.attempts(job_id)

    # -- handlers ----------------------------------------------------------------------

    def handler(self, payload_type: type[Any]) -> Callable[[H], H]:
        """Registers the decorated function as the handler of a ``@job`` type (as
        ``Worker.handler``)."""
        wire_name = spec_of(payload_type).wire_name  # a type without @job fails here
        self._check_no_worker("register handlers")
        self._check_no_handler(wire_name)

        def register(fn: H) -> H:
            if not callable(fn):
                raise TypeError("a handler must be callable")
            self._check_no_handler(wire_name)
            self._handlers.append((payload_type, fn))
            return fn

        return register

    def _check_no_handler(self, wire_name: str) -> None:
        if any(spec_of(registered).wire_name == wire_name for registered, _ in self._handlers):
            raise ValueError(f"wire name {wire_name!r} already has a handler")

    def use(self, middleware: Middleware) -> None:
        """Adds middleware around every handler (as ``Worker.use``)."""
        self._check_no_worker("add middleware")
        self._middleware.append(middleware)

    def include(self, worker: Worker) -> None:
        """Takes the handlers and middleware registered on an application's ``Worker``
        (which itself is not started), and its ``cancellation_grace`` and
        ``max_output_bytes``, which decide outcomes. Its lease, concurrency and queues
        are not taken: the test coordinator's own arguments set those."""
        self._check_no_worker("include a worker")
        for wire_name in worker._handlers:
            self._check_no_handler(wire_name)
        for definition in worker._handlers.values():
            self._handlers.append((definition.spec.payload_type, definition.fn))
        self._middleware.extend(worker._middleware)
        config = worker._config
        self._run_limits = {
            "cancellation_grace": config.cancellation_grace,
            "max_output_bytes": config.max_output_bytes,
        }

    async def crash_worker(self) -> None:
        """Ends the worker as ``kill -9`` would: no result, release or drain reaches the
        coordinator, whose leases then lapse (``advance`` past them recovers the jobs).
        The next wait starts a new worker with the same handlers."""
        worker, self._worker, self._timers = self._worker, None, None
        if worker is not None:
            await worker._vanish()

    # -- time and work -----------------------------------------------------------------

    async def advance(self, delta: timedelta) -> None:
        """Moves the virtual clock forward by ``delta``, stopping at every timer on the
        way (schedule ticks, run-at times, lease deadlines, the worker's execution
        timeouts, graces and heartbeats); at each stop the worker's timers fire, its
        heartbeat is answered, lease expiry, due-job promotion and the schedules run,
        and what became runnable is handed to the worker.

        Raises:
            TypeError: ``delta`` is not a timedelta.
            ValueError: ``delta`` is negative, not whole milliseconds, or over a year;
                the clock has not moved.
            NotIdle: The worker did not answer within ``idle_timeout``.
        """
        target_ms = self.clock.now_ms() + _checked_delta_ms(delta)
        watch = await self._watch()
        await watch.settle(blocked_after_s=self._blocked_after_s)
        for _ in range(MAX_STOPS):
            now_ms = self.clock.now_ms()
            stop_ms = min(target_ms, await self._next_timer_ms(now_ms))
            self.clock.advance(stop_ms - now_ms)
            await self._at_stop(watch)
            if stop_ms >= target_ms:
                return
        raise NotIdle(
            f"advance stopped at {MAX_STOPS} timers before reaching its end; it is now {self.now} "
            "(advance in smaller steps)"
        )

    async def run_until_idle(self, within: timedelta | None = None) -> None:
        """Runs the registered handlers until no job they serve is runnable now and none
        is running or awaiting its acknowledgement. The clock does not move.

        Raises:
            ValueError: ``within`` is not positive.
            NotIdle: Still busy after ``within`` (real time; default ``idle_timeout``),
                naming the jobs still going; say, a handler waiting on virtual time
                (which only ``advance`` moves) or one that enqueues work forever.
        """
        bound_s = self._idle_timeout_s if within is None else within.total_seconds()
        if bound_s <= 0:
            raise ValueError(f"within must be positive, got {within}")
        watch = await self._watch()
        await watch.until_idle(bound_s)

    async def _at_stop(self, watch: IdleWatch) -> None:
        app = self._started().app
        if self._timers is not None and self._timers.fire_due():
            # The woken runs and heartbeat loop take their next step first: a run the
            # timeout ended reports, and a heartbeat the loop sends is the one awaited.
            for _ in range(3):
                await asyncio.sleep(0)
        await watch.heartbeat()
        await app.run_maintenance()
        await app.run_schedules()
        await watch.settle(blocked_after_s=self._blocked_after_s)

    async def _next_timer_ms(self, now_ms: int) -> int:
        """The earliest timer after ``now_ms``, of the coordinator or the worker."""
        app = self._started().app
        candidates: list[int] = []
        token = ""
        while True:
            views, token = await app.list_schedules(page_size=0, page_token=token)
            candidates.extend(v.record.next_tick_ms for v in views if v.record.next_tick_ms is not None)
            if not token:
                break
        for state in (StoredState.SCHEDULED, StoredState.RESERVED, StoredState.RUNNING):
            token = ""
            while True:
                records, token = await app.list_jobs(
                    queue=None, state=state, wire_name=None, page_size=0, page_token=token
                )
                scheduled = state is StoredState.SCHEDULED
                for record in records:
                    deadline = record.run_at_ms if scheduled else record.lease_expires_at_ms
                    candidates.append(deadline if deadline is not None else now_ms)
                if not token:
                    break
        if self._timers is not None and self._worker is not None:
            purposes = self._worker_view().timer_purposes()
            deadline_ms = self._timers.next_deadline_ms(purposes)
            if deadline_ms is not None:
                candidates.append(deadline_ms)
        later = [c for c in candidates if c > now_ms]
        return min(later) if later else now_ms + 10**15

    # -- the worker --------------------------------------------------------------------

    async def _watch(self) -> IdleWatch:
        running = self._started()
        await self._ensure_worker()
        view = self._worker_view() if self._worker is not None else None
        return IdleWatch(running.app, view, self._idle_timeout_s, self._runs_first_seen)

    def _worker_view(self) -> WorkerView:
        assert self._worker is not None and self._worker._engine is not None
        return WorkerView(self._worker.worker_id, self._worker._engine, self._worker_queues())

    def _worker_queues(self) -> tuple[str, ...]:
        if self._queues is not None:
            return self._queues
        return tuple(sorted({spec_of(payload_type).queue for payload_type, _ in self._handlers}))

    async def _ensure_worker(self) -> None:
        if self._worker is not None or not self._handlers:
            return
        worker = Worker(
            self.target,
            queues=self._worker_queues(),
            concurrency=self._concurrency,
            lease=self._lease,
            drain_timeout=timedelta(0),
            reconnect_initial_delay=timedelta(milliseconds=10),
            reconnect_max_delay=timedelta(milliseconds=100),
            worker_id=f"runwick-test-worker-{next(_worker_numbers)}",
            middleware=self._middleware,
            **self._run_limits,
        )
        for payload_type, fn in self._handlers:
            worker.handler(payload_type)(fn)
        timers = VirtualTimers(self.clock.now_ms)
        worker._timers = timers
        await worker.start()
        self._worker, self._timers = worker, timers
        view = self._worker_view()
        await view.wait_connected(self._started().app, self._idle_timeout_s)

    async def _stop_worker(self) -> None:
        worker, self._worker = self._worker, None
        if worker is None:
            return
        if self._timers is not None:
            self._timers.release_all()  # graces end now: handlers left running are dropped
        await worker.stop()

    def _check_no_worker(self, what: str) -> None:
        if self._worker is not None:
            raise RuntimeError(
                f"cannot {what}: the test worker already started (do it before the first wait)"
            )

    def _started(self) -> RunningCoordinator:
        if self._running is None:
            raise RuntimeError("start the test coordinator first (async with AsyncCoordinator() as ...)")
        return self._running


def _checked_delta_ms(delta: timedelta) -> int:
    if not isinstance(delta, timedelta):
        raise TypeError(f"advance takes a timedelta, got {type(delta).__name__}")
    if delta < timedelta(0):
        raise ValueError(
            f"advance needs a delta of zero or more, got {delta}: the virtual clock does not go back"
        )
    if delta > MAX_ADVANCE:
        raise ValueError(f"advance moves at most {MAX_ADVANCE.days} days at once, got {delta}")
    if delta % timedelta(milliseconds=1):
        raise ValueError(f"advance moves whole milliseconds, got {delta}")
    return delta // timedelta(milliseconds=1)
