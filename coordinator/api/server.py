"""Starts and stops the coordinator: gRPC server, dispatcher and maintenance loop.

``start_coordinator(config) -> RunningCoordinator`` binds (port 0 picks a free port,
which ``.port`` reports) and ``await running.stop()`` shuts down gracefully: health
NOT_SERVING, Drain to every worker, then the server stops with a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from coordinator.api.errors import ErrorInterceptor
from coordinator.api.job_servicer import JobServicer
from coordinator.api.worker_servicer import WorkerServicer
from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher
from coordinator.domain.clock import Clock, OffsetClock, SystemClock
from coordinator.listen import listen_for_jobs
from coordinator.service import JobsService
from coordinator.store import Store
from coordinator.watch import TerminalWatch
from coordinator.worker_ops import WorkerOps
from worker_sdk.proto.runwick.v1 import (
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
)
_CLOCK_REFRESH_S = 60.0


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
    health: HealthServicer
    write_executor: ThreadPoolExecutor
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stopped: bool = False

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.port}"

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
        await self.health.enter_graceful_shutdown()
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
        self.write_executor.shutdown(wait=True)
        self.store.close()
        log.info("coordinator stopped")


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
    """Opens the store (creating SQLite on first start), binds and starts serving."""
    if store is None:
        store = await asyncio.to_thread(Store.open, config.database_url)
    if clock is None:
        # with PostgreSQL every replica reads time as the database tells it.
        clock = (
            OffsetClock(await asyncio.to_thread(_database_offset_ms, store))
            if store.postgres
            else SystemClock()
        )
    rng = rng or random.Random()
    # SQLite has one writer: one thread keeps writes in order instead of queueing on a lock.
    write_executor = ThreadPoolExecutor(
        max_workers=1 if not store.postgres else 4, thread_name_prefix="runwick-write"
    )
    watch = TerminalWatch()
    service = JobsService(store, clock, config, rng)
    ops = WorkerOps(store, clock, config, rng)
    dispatcher = Dispatcher(ops, config, clock, write_executor, watch)

    server = grpc.aio.server(
        interceptors=[ErrorInterceptor()],
        options=[
            ("grpc.so_reuseport", 0),  # a second server on the port must fail, not steal traffic
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ],
    )
    job_service_pb2_grpc.add_JobServiceServicer_to_server(
        JobServicer(service, dispatcher, watch, write_executor, config.idle_recheck_interval_s), server
    )
    worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(
        WorkerServicer(dispatcher, f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}", config.hello_timeout_s),
        server,
    )
    health_servicer = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = server.add_insecure_port(f"{config.host}:{config.port}")
    if port == 0:
        store.close()
        raise OSError(f"cannot listen on {config.host}:{config.port}")
    await server.start()
    for name in ("", *SERVICE_NAMES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    running = RunningCoordinator(
        config, server, port, store, clock, service, ops, dispatcher, health_servicer, write_executor
    )
    running.tasks = [
        asyncio.create_task(dispatcher.run(), name="runwick-dispatch"),
        asyncio.create_task(running._maintenance_loop(), name="runwick-maintenance"),
    ]
    if store.postgres:
        running.tasks.append(
            asyncio.create_task(listen_for_jobs(store.url, dispatcher), name="runwick-listen")
        )
    log.info(
        "coordinator listening on %s:%d (%s)", config.host, port, "postgresql" if store.postgres else "sqlite"
    )
    return running
