"""``Worker``: runs handlers for jobs the coordinator pushes over one stream."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import grpc
import grpc.aio

from worker_sdk._background import BackgroundWorker, start_in_background
from worker_sdk._config import WorkerConfig, build_config, default_worker_id
from worker_sdk._connection import (
    ConnectionOptions,
    PemSource,
    connection_options,
    warn_if_token_travels_in_clear,
)
from worker_sdk._engine import Engine
from worker_sdk._jobs import spec_of
from worker_sdk._metrics import WorkerMetrics, default_registry
from worker_sdk._metrics_http import MetricsHttpLimits, MetricsHttpServer, serve_metrics
from worker_sdk._middleware import Middleware
from worker_sdk._pipeline import HandlerDef
from worker_sdk._session import Session
from worker_sdk._timers import REAL_TIMERS, Timers

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger(__name__)

H = TypeVar("H", bound=Callable[..., Any])


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for ``async def`` functions and objects with an ``async def __call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = None if inspect.isroutine(fn) else type(fn).__dict__.get("__call__")
    return call is not None and inspect.iscoroutinefunction(call)


class Worker:
    """Runs handlers for jobs pushed by the coordinator (docs/protocol.md, worker_service.proto).

    Register handlers with ``@worker.handler(PayloadType)``, add middleware with
    ``worker.use(...)``, then either embed it in a running asyncio program
    (``async with worker:`` or ``await worker.start()`` / ``await worker.stop()``), start
    it on a thread of its own in a program without a loop (``worker.start_in_background()``,
    returning a handle with ``stop(timeout)``), or run it standalone with ``worker.run()``,
    which drains on SIGTERM/SIGINT.

    Args:
        target: The coordinator address, e.g. ``"runwick:7233"``; or a
            ``ConnectionOptions`` holding it with the token and TLS settings (then pass
            none of the other connection arguments).
        token: Bearer token with the ``work`` scope (R-21); None for an insecure coordinator.
        queues: Queues to take jobs from.
        concurrency: Runs at once; sync handlers get a thread pool of this size.
        lease: Lease asked for on claims and heartbeats (R-10); whole milliseconds.
        heartbeat_interval: Time between heartbeats; default ``lease / 3``.
        drain_timeout: How long running handlers may finish on shutdown (R-12).
        cancellation_grace: How long a cancelled handler may take to return (R-7).
        max_output_bytes: Larger outputs fail the job with ``output_too_large``.
        worker_id: Unique per process; default ``hostname-pid-random``.
        reconnect_initial_delay: First delay before reconnecting a broken stream.
        reconnect_max_delay: Cap of the doubling, jittered reconnect delay.
        hello_timeout: How long to wait for the coordinator's Welcome.
        ack_timeout: How long shutdown waits for the last results to be acknowledged.
        middleware: Middleware around every handler call, first outermost (R-6).
        credentials: TLS channel credentials; None for a plaintext channel unless
            ``ca``/``cert``/``key`` or ``tls`` are given.
        ca: TLS: the CA that signed the coordinator's certificate (path or PEM).
        cert: Mutual TLS: this worker's certificate (path or PEM); needs ``key``.
        key: Mutual TLS: the private key of ``cert``.
        tls: TLS trusting the system's roots, without ``ca``/``cert``/``key``.
        options: Extra gRPC channel options.
        metrics_registry: The Prometheus registry the worker's metrics go on; default
            prometheus_client's default registry (what the host service exposes).
        metrics_port: Also serve that registry's ``/metrics`` on this HTTP port from
            ``start`` to ``stop`` (0 picks a free one); None serves nothing. It is
            served from the worker's event loop, with ``metrics_limits``' bounds.
        metrics_host: The address ``metrics_port`` listens on: loopback by default;
            ``"0.0.0.0"`` (or the pod's address) lets a Prometheus on another host in.
        metrics_limits: Connections at once, request-head size and idle time of the
            ``/metrics`` server.

    Raises:
        ValueError: An argument is out of range (``ArgumentError`` for the connection
            arguments, see ``ConnectionOptions``).
    """

    def __init__(
        self,
        target: str | ConnectionOptions,
        *,
        token: str | None = None,
        queues: Sequence[str] = ("default",),
        concurrency: int = 8,
        lease: timedelta = timedelta(seconds=60),
        heartbeat_interval: timedelta | None = None,
        drain_timeout: timedelta = timedelta(seconds=30),
        cancellation_grace: timedelta = timedelta(seconds=10),
        max_output_bytes: int = 65_536,
        worker_id: str | None = None,
        reconnect_initial_delay: timedelta = timedelta(milliseconds=100),
        reconnect_max_delay: timedelta = timedelta(seconds=5),
        hello_timeout: timedelta = timedelta(seconds=10),
        ack_timeout: timedelta = timedelta(seconds=5),
        middleware: Sequence[Middleware] = (),
        credentials: grpc.ChannelCredentials | None = None,
        ca: PemSource | None = None,
        cert: PemSource | None = None,
        key: PemSource | None = None,
        tls: bool = False,
        options: Sequence[tuple[str, Any]] = (),
        metrics_registry: CollectorRegistry | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        metrics_limits: MetricsHttpLimits | None = None,
    ) -> None:
        self._connection = connection_options(
            target,
            token=token,
            ca=ca,
            cert=cert,
            key=key,
            tls=tls,
            credentials=credentials,
            channel_options=options,
        )
        warn_if_token_travels_in_clear(self._connection, "Worker")
        self._config: WorkerConfig = build_config(
            worker_id=worker_id,
            queues=queues,
            concurrency=concurrency,
            lease=lease,
            heartbeat_interval=heartbeat_interval,
            drain_timeout=drain_timeout,
            cancellation_grace=cancellation_grace,
            max_output_bytes=max_output_bytes,
            reconnect_initial_delay=reconnect_initial_delay,
            reconnect_max_delay=reconnect_max_delay,
            hello_timeout=hello_timeout,
            ack_timeout=ack_timeout,
        )
        self._own_worker_id = worker_id is None
        """The ID was made here: a process forked from this one makes its own (pre-fork
        servers declare the worker in the master and start it in each child)."""
        self._id_pid = os.getpid()
        if metrics_port is not None and not 0 <= metrics_port <= 65_535:
            raise ValueError(f"metrics_port must be 0 to 65535 or None, got {metrics_port!r}")
        self._metrics_registry = metrics_registry
        self._metrics = WorkerMetrics.for_registry(metrics_registry)
        self._metrics_address = (metrics_host, metrics_port)
        self._metrics_limits = metrics_limits
        self._metrics_server: MetricsHttpServer | None = None
        self._handlers: dict[str, HandlerDef] = {}
        self._middleware: list[Middleware] = list(middleware)
        self._engine: Engine | None = None
        self._session: Session | None = None
        self._channel: grpc.aio.Channel | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stop_task: asyncio.Task[None] | None = None
        self._timers: Timers = REAL_TIMERS
        """The clock of timeouts, graces, heartbeats and leases; a test coordinator
        (``worker_sdk.testing``) sets its virtual one before ``start``."""

    @property
    def worker_id(self) -> str:
        """This worker's ID, sent in every Hello: unique per process (a default one is
        made anew in a process forked from the one that declared the worker)."""
        if self._own_worker_id and self._id_pid != os.getpid() and self._engine is None:
            self._config = dataclasses.replace(self._config, worker_id=default_worker_id())
            self._id_pid = os.getpid()
        return self._config.worker_id

    @property
    def metrics_port(self) -> int | None:
        """The port ``/metrics`` is served on while running, if ``metrics_port`` was given."""
        return None if self._metrics_server is None else self._metrics_server.port

    @property
    def connected(self) -> bool:
        """True while a stream to the coordinator is open and welcomed (for health checks)."""
        return self._session is not None and self._session.ready

    def handler(self, payload_type: type[Any]) -> Callable[[H], H]:
        """Registers the decorated function as the handler of a ``@job`` type.

        The handler is ``(job: PayloadType, ctx: JobContext) -> bytes | None``, either
        ``async def`` (runs on the event loop) or plain (runs on the thread pool).

        Raises:
            ArgumentError: ``payload_type`` is not declared with ``@job``.
            ValueError: The wire name already has a handler.
            RuntimeError: The worker already started.
        """
        spec = spec_of(payload_type)
        self._check_not_started("register handlers")
        if spec.wire_name in self._handlers:
            raise ValueError(f"wire name {spec.wire_name!r} already has a handler")

        def register(fn: H) -> H:
            if not callable(fn):
                raise TypeError("a handler must be callable")
            self._handlers[spec.wire_name] = HandlerDef(spec, fn, is_async_callable(fn))
            return fn

        return register

    def use(self, middleware: Middleware) -> None:
        """Adds middleware inside the ones added before (R-6); before ``start`` only."""
        self._check_not_started("add middleware")
        self._middleware.append(middleware)

    async def start(self) -> None:
        """Connects in the background and starts taking jobs; returns at once.

        Call it inside the host's running event loop. Connection failures are retried
        with backoff, never raised.

        Raises:
            RuntimeError: No handler is registered, or the worker was already started.
            OSError: ``metrics_port`` cannot be bound.
        """
        self._check_not_started("start again")
        if not self._handlers:
            raise RuntimeError("register at least one handler before starting the worker")
        self.worker_id  # noqa: B018 - a forked process takes its own ID before it connects
        config = self._config
        host, port = self._metrics_address
        if port is not None and self._metrics_server is None:
            registry = self._metrics_registry if self._metrics_registry is not None else default_registry()
            try:
                self._metrics_server = await serve_metrics(registry, host, port, limits=self._metrics_limits)
            except OSError as exc:
                raise OSError(f"cannot serve worker {exc}") from exc
            logger.info("worker metrics on http://%s:%d/metrics", host, self.metrics_port)
        self._executor = ThreadPoolExecutor(config.concurrency, thread_name_prefix="runwick-handler")
        self._channel = self._connection.open_aio_channel()
        engine = Engine(
            config, self._handlers, self._middleware, self._executor, self._metrics, timers=self._timers
        )
        session = Session(
            self._channel,
            engine,
            metadata=self._connection.metadata,
            hello_timeout=config.hello_timeout,
            reconnect_initial_delay=config.reconnect_initial_delay,
            reconnect_max_delay=config.reconnect_max_delay,
            metrics=self._metrics,
        )
        engine.attach(session)
        self._engine, self._session = engine, session
        self._tasks = [
            asyncio.create_task(session.run(), name="runwick-stream"),
            asyncio.create_task(engine.heartbeater.run(), name="runwick-heartbeat"),
        ]
        logger.info(
            "worker %s started: queues %s, concurrency %d",
            config.worker_id,
            ",".join(config.queues),
            config.concurrency,
        )

    async def stop(self) -> None:
        """Drains and stops (R-12); safe to call more than once, or before ``start``.

        Stops taking jobs, releases claims not yet started, lets running handlers finish
        within ``drain_timeout``, interrupts the rest (``worker_shutdown``), waits for the
        last acknowledgements, then closes the stream.
        """
        if self._engine is None:
            return
        if self._stop_task is None:
            self._stop_task = asyncio.create_task(self._stop())
        await asyncio.shield(self._stop_task)

    async def _stop(self) -> None:
        assert self._engine is not None and self._session is not None
        try:
            await self._engine.drain(self._config.drain_timeout, stopping=True)
            await self._engine.close()
            await self._session.close()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if self._channel is not None:
                await self._channel.close(None)
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
            if self._metrics_server is not None:
                await self._metrics_server.close()
                self._metrics_server = None
            logger.info("worker %s stopped", self._config.worker_id)

    async def _vanish(self) -> None:
        """Ends the worker as ``kill -9`` would, for tests of lease expiry: async runs
        and the stream are cut off, nothing more is sent (no result, no release, no
        drain), and the coordinator is left to recover the claims when their leases
        lapse. Threads of sync handlers cannot be killed: they run on, unheard."""
        if self._engine is None or self._stop_task is not None:
            return
        self._stop_task = asyncio.create_task(asyncio.sleep(0))  # stop() is now a no-op
        tasks = [run.task for run in self._engine.table.runs.values() if run.task is not None]
        tasks.extend(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close(None)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        logger.info("worker %s vanished (simulated crash)", self._config.worker_id)

    def start_in_background(self, *, start_timeout: timedelta = timedelta(seconds=30)) -> BackgroundWorker:
        """Starts the worker on a thread of its own with its own event loop, for hosts
        without one (Django, Flask, gunicorn's sync workers); returns at once.

        Call ``stop(timeout)`` on the handle to drain and stop it (R-12); it is also
        drained when the interpreter exits normally (the host's own graceful shutdown).
        Signals stay the host's: the thread installs no handlers.

        Under a pre-fork server (gunicorn), call it in each worker process after the fork
        (its ``post_worker_init`` hook), never before: threads and gRPC channels do not
        survive ``fork()``.

        Args:
            start_timeout: How long to wait for the thread to start the worker.

        Raises:
            RuntimeError: No handler is registered, or the worker was already started.
            OSError: ``metrics_port`` cannot be bound.
        """
        self._check_not_started("start again")
        if not self._handlers:
            raise RuntimeError("register at least one handler before starting the worker")
        return start_in_background(
            self.worker_id, self.start, self.stop, self._config.drain_timeout, start_timeout.total_seconds()
        )

    def run(self) -> None:
        """Runs the worker until SIGTERM or SIGINT, then drains and returns.

        Uses its own event loop (``asyncio.run``); a second signal while draining
        interrupts the drain.
        """
        asyncio.run(self._run_until_signal())

    async def _run_until_signal(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # Windows, or not the main thread
                pass
        try:
            await self.start()
            await stop.wait()
            logger.info("worker %s received a stop signal; draining", self._config.worker_id)
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def _check_not_started(self, what: str) -> None:
        if self._engine is not None:
            raise RuntimeError(f"cannot {what}: the worker already started")
