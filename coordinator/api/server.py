"""Starts and stops the coordinator: gRPC server, dispatcher and maintenance loop, and
optionally a plaintext health port and a Prometheus metrics port.

``start_coordinator(config) -> RunningCoordinator`` binds (port 0 picks a free port,
which ``.port`` reports) and ``await running.stop()`` shuts down gracefully: readiness
NOT_SERVING, Drain to every worker, then the server stops with a grace period, and the
database is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.api.admin_servicer import AdminServicer
from coordinator.api.auth import AuthInterceptor
from coordinator.api.errors import ErrorInterceptor
from coordinator.api.health import Health
from coordinator.api.job_servicer import JobServicer
from coordinator.api.metrics_interceptor import MetricsInterceptor
from coordinator.api.worker_servicer import WorkerServicer
from coordinator.audit import AuditLog
from coordinator.config import CoordinatorConfig, check_security
from coordinator.dispatch import Dispatcher
from coordinator.domain.clock import Clock, OffsetClock, SystemClock
from coordinator.listen import listen_for_jobs
from coordinator.manage import ManagementService
from coordinator.metrics import CoordinatorMetrics
from coordinator.service import JobsService
from coordinator.store import Store
from coordinator.tokens import TokenService
from coordinator.watch import TerminalWatch
from coordinator.worker_ops import WorkerOps
from worker_sdk.proto.runwick.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
)
_CLOCK_REFRESH_S = 60.0
_QueueStats = tuple[dict[tuple[str, str], int], dict[str, int], int]
"""Depth per (queue, state), oldest due run-at per queue, and the time they were read."""


@dataclass
class RunningCoordinator:
    config: CoordinatorConfig
    server: grpc.aio.Server
    port: int
    store: Store
    clock: Clock
    service: JobsService
    ops: WorkerOps
    dispatcher: Dispatcher
    health: Health
    write_executor: ThreadPoolExecutor
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stopped: bool = False
    metrics: CoordinatorMetrics = field(default_factory=CoordinatorMetrics)
    """The registry behind ``/metrics`` (also readable in-process)."""
    health_server: grpc.aio.Server | None = None
    health_port: int | None = None
    """The plaintext health port, when one is served."""
    metrics_port: int | None = None
    """The HTTP port of ``/metrics``, when it is served."""
    check_executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="runwick-check")
    )
    _check: asyncio.Future[_QueueStats] | None = field(default=None, repr=False)
    tokens: TokenService | None = None
    """Token checks and management (tokens can be managed with authentication off too)."""
    bootstrap_token: str | None = None
    """The admin token created on this first start (show it once), else None."""

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def check_database(self) -> bool:
        """Reads the queue gauges; whether that worked decides readiness. A check still
        hanging from before counts as a failure and no second one is started."""
        loop = asyncio.get_running_loop()
        ok = False
        if self._check is None or self._check.done():
            self._check = loop.run_in_executor(self.check_executor, _queue_stats, self.store, self.clock)
        try:
            depths, oldest, now_ms = await asyncio.wait_for(
                asyncio.shield(self._check), self.config.health_check_timeout_s
            )
        except TimeoutError:
            log.warning("database check took over %.1f s", self.config.health_check_timeout_s)
        except Exception as exc:
            log.warning("database check failed: %s", type(exc).__name__)
            log.debug("database check failure", exc_info=exc)
        else:
            ok = True
            self.metrics.queue_stats(depths, oldest, now_ms)
        self.metrics.database_up.set(1 if ok else 0)
        await self.health.database_checked(ok)
        return ok

    async def _check_loop(self) -> None:
        while True:
            await self.check_database()
            await asyncio.sleep(self.config.health_check_interval_s)

    async def run_maintenance(self) -> None:
        """One pass of lease expiry and due-job promotion (the loop calls it; tests with
        a fake clock call it after advancing the clock)."""
        loop = asyncio.get_running_loop()
        for task in (self.ops.expire_leases, self.ops.promote_due):
            answers = await loop.run_in_executor(self.write_executor, task)
            self.dispatcher.absorb(answers)

    async def _maintenance_loop(self) -> None:
        since_clock_refresh = 0.0
        while True:
            await asyncio.sleep(self.config.maintenance_interval_s)
            try:
                await self.run_maintenance()
                since_clock_refresh += self.config.maintenance_interval_s
                if isinstance(self.clock, OffsetClock) and since_clock_refresh >= _CLOCK_REFRESH_S:
                    since_clock_refresh = 0.0
                    self.clock.offset_ms = await asyncio.to_thread(_database_offset_ms, self.store)
            except Exception:
                log.exception("maintenance pass failed; retrying next interval")

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful shutdown: not serving, drain workers, stop with grace, close the store."""
        if self.stopped:
            return
        self.stopped = True
        await self.health.draining()  # first, so no new traffic is routed here
        drain_s = self.config.drain_timeout_s if grace_s is None else grace_s
        await self.dispatcher.drain(drain_s)
        self.dispatcher.stop()
        for task in self.tasks[1:]:  # the dispatcher (first) ends by itself after stop()
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.dispatcher.close_sessions()
        await self.server.stop(grace=min(drain_s, 5.0))
        await self.health.stop()
        if self.health_server is not None:
            await self.health_server.stop(grace=None)
        await asyncio.to_thread(self.metrics.close)
        self.write_executor.shutdown(wait=True)
        self.check_executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()
        log.info("coordinator stopped")


def _queue_stats(store: Store, clock: Clock) -> _QueueStats:
    now_ms = clock.now_ms()
    return store.queue_depths(), store.oldest_due_by_queue(now_ms), now_ms


def server_options(config: CoordinatorConfig) -> list[tuple[str, Any]]:
    """The API server's channel options (SPEC §8: keepalive, sizes, connection age)."""
    return [
        ("grpc.so_reuseport", 0),  # a second server on the port must fail, not steal traffic
        # Sized from the bounds (SPEC §5): a valid request never hits the transport limit
        # before the bound's clear error; one far over it gets RESOURCE_EXHAUSTED.
        ("grpc.max_send_message_length", config.message_limit_bytes()),
        ("grpc.max_receive_message_length", config.message_limit_bytes()),
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        # Streams live as long as their worker: ending connections at an age makes
        # workers reconnect and spread over the replicas behind the service.
        ("grpc.max_connection_age_ms", config.max_connection_age_ms),
        ("grpc.max_connection_age_grace_ms", config.max_connection_age_grace_ms),
    ]


def _bind(
    server: grpc.aio.Server, host: str, port: int, credentials: grpc.ServerCredentials | None = None
) -> int:
    try:
        if credentials is None:
            bound = server.add_insecure_port(f"{host}:{port}")
        else:
            bound = server.add_secure_port(f"{host}:{port}", credentials)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc}") from exc
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    return bound


def _tls_credentials(config: CoordinatorConfig) -> grpc.ServerCredentials | None:
    """TLS on the API port when configured; with a client CA, client certificates are
    required (mutual TLS)."""
    if not config.tls_cert_file or not config.tls_key_file:
        return None
    key, chain = Path(config.tls_key_file).read_bytes(), Path(config.tls_cert_file).read_bytes()
    client_ca = Path(config.tls_client_ca_file).read_bytes() if config.tls_client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _write_token_file(path: str, token: str) -> None:
    """Writes the token readable by this user only, replacing the file atomically."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    os.replace(partial, target)


def _database_offset_ms(store: Store) -> int:
    db_now = store.database_time_ms()
    return 0 if db_now is None else db_now - SystemClock().now_ms()


async def start_coordinator(
    config: CoordinatorConfig,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    rng: random.Random | None = None,
) -> RunningCoordinator:
    """Opens the store (creating SQLite on first start), binds and starts serving.

    Raises ConfigError for an unsafe configuration (authentication off on a non-loopback
    address, half-configured TLS) and OSError when a TLS file cannot be read.
    """
    check_security(config)
    tls = _tls_credentials(config)  # read first: a bad path fails before anything starts
    if store is None:
        store = await asyncio.to_thread(Store.open, config.database_url, bounds=config.bounds)
    elif store.bounds != config.bounds:
        raise ValueError("the store's bounds differ from config.bounds; open it with bounds=config.bounds")
    if clock is None:
        # with PostgreSQL every replica reads time as the database tells it.
        clock = (
            OffsetClock(await asyncio.to_thread(_database_offset_ms, store))
            if store.postgres
            else SystemClock()
        )
    tokens = TokenService(store, clock, config.auth_cache_ttl_s)
    bootstrap_token = None
    if config.auth_enabled:
        try:
            bootstrap_token = await asyncio.to_thread(tokens.bootstrap)
            if bootstrap_token is not None and config.admin_token_file:
                await asyncio.to_thread(_write_token_file, config.admin_token_file, bootstrap_token)
        except BaseException:
            store.close()
            raise
    rng = rng or random.Random()
    # SQLite has one writer: one thread keeps writes in order instead of queueing on a lock.
    write_executor = ThreadPoolExecutor(
        max_workers=1 if not store.postgres else 4, thread_name_prefix="runwick-write"
    )
    watch = TerminalWatch()
    metrics = CoordinatorMetrics()
    store.on_transaction = metrics.transaction
    service = JobsService(store, clock, config, rng, metrics)
    ops = WorkerOps(store, clock, config, rng)
    dispatcher = Dispatcher(ops, config, clock, write_executor, watch, metrics)

    server = grpc.aio.server(
        # Metrics first: it sees the status the interceptors after it settle on.
        interceptors=[
            MetricsInterceptor(metrics),
            AuthInterceptor(tokens if config.auth_enabled else None),
            ErrorInterceptor(),
        ],
        options=server_options(config),
    )
    job_service_pb2_grpc.add_JobServiceServicer_to_server(
        JobServicer(
            service,
            dispatcher,
            watch,
            write_executor,
            config.idle_recheck_interval_s,
            manage=ManagementService(store, clock, metrics),
        ),
        server,
    )
    admin_service_pb2_grpc.add_AdminServiceServicer_to_server(
        AdminServicer(tokens, AuditLog(store, config), dispatcher), server
    )
    worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(
        WorkerServicer(
            dispatcher,
            f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
            config.hello_timeout_s,
            max_stream_age_s=config.max_connection_age_ms / 1000,
        ),
        server,
    )
    health_state = Health(SERVICE_NAMES)
    health_pb2_grpc.add_HealthServicer_to_server(health_state.api, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    health_server: grpc.aio.Server | None = None
    health_port = metrics_port = None
    try:
        port = _bind(server, config.host, config.port, tls)
        if config.health_port is not None:
            # Plaintext and health only, for Kubernetes' gRPC probes whatever the API port uses.
            health_server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
            health_pb2_grpc.add_HealthServicer_to_server(health_state.probes, health_server)
            health_port = _bind(health_server, config.host, config.health_port)
        if config.metrics_port is not None:
            metrics_port = metrics.serve(config.host, config.metrics_port)
    except OSError:
        metrics.close()
        write_executor.shutdown(wait=False)
        store.close()
        raise
    await server.start()
    if health_server is not None:
        await health_server.start()
    await health_state.start()
    running = RunningCoordinator(
        config,
        server,
        port,
        store,
        clock,
        service,
        ops,
        dispatcher,
        health_state,
        write_executor,
        metrics=metrics,
        health_server=health_server,
        health_port=health_port,
        metrics_port=metrics_port,
        tokens=tokens,
        bootstrap_token=bootstrap_token,
    )
    running.tasks = [
        asyncio.create_task(dispatcher.run(), name="runwick-dispatch"),
        asyncio.create_task(running._maintenance_loop(), name="runwick-maintenance"),
        asyncio.create_task(running._check_loop(), name="runwick-check"),
    ]
    if store.postgres:
        running.tasks.append(
            asyncio.create_task(listen_for_jobs(store.url, dispatcher), name="runwick-listen")
        )
    log.info(
        "coordinator listening on %s:%d (%s); health port %s, metrics port %s",
        config.host,
        port,
        "postgresql" if store.postgres else "sqlite",
        health_port if health_port is not None else "off",
        metrics_port if metrics_port is not None else "off",
    )
    return running
