"""The coordinator process: the facade (``coordinator.app``) with its transports — the
gRPC API and health port, the web dashboard, the Prometheus ``/metrics`` endpoint —
started and stopped in the right order. The composition root; ``runwick serve`` and the
tests start it.

``start_coordinator(config) -> RunningCoordinator`` binds (port 0 picks a free port,
which ``.port`` reports) and ``await running.stop()`` shuts down gracefully: readiness
NOT_SERVING, Drain to every worker, then the servers stop with a grace period, and the
database is closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
from dataclasses import dataclass
from pathlib import Path

from coordinator.api.server import GrpcServers, bind_health, serve_grpc, tls_reloader
from coordinator.api.tls import TlsReloader
from coordinator.app import Coordinator
from coordinator.config import CoordinatorConfig, check_security
from coordinator.dashboard import DashboardServer, serve_dashboard
from coordinator.domain.clock import Clock
from coordinator.metrics import CoordinatorMetrics
from coordinator.store import Store
from worker_sdk._metrics_http import MetricsHttpLimits, MetricsHttpServer, serve_metrics

log = logging.getLogger(__name__)


@dataclass
class RunningCoordinator:
    app: Coordinator
    grpc: GrpcServers
    metrics_port: int | None = None
    """The HTTP port of ``/metrics``, when it is served."""
    dashboard: DashboardServer | None = None
    metrics_server: MetricsHttpServer | None = None
    tls: TlsReloader | None = None
    """The TLS files, re-read when they change, when TLS is configured."""
    tls_watch: asyncio.Task[None] | None = None
    """Looks for renewed TLS files for the HTTPS servers."""
    stopped: bool = False

    @property
    def dashboard_port(self) -> int | None:
        """The HTTP(S) port of the dashboard, when it is served."""
        return self.dashboard.port if self.dashboard is not None else None

    @property
    def config(self) -> CoordinatorConfig:
        return self.app.config

    @property
    def store(self) -> Store:
        return self.app.store

    @property
    def clock(self) -> Clock:
        return self.app.clock

    @property
    def metrics(self) -> CoordinatorMetrics:
        """The registry behind ``/metrics`` (also readable in-process)."""
        return self.app.metrics

    @property
    def bootstrap_token(self) -> str | None:
        """The admin token created on this first start (show it once), else None."""
        return self.app.bootstrap_token

    @property
    def port(self) -> int:
        return self.grpc.port

    @property
    def health_port(self) -> int | None:
        return self.grpc.health_port

    @property
    def scaler_port(self) -> int | None:
        """The port serving KEDA's external scaler, when one is served."""
        return self.grpc.scaler_port

    @property
    def target(self) -> str:
        return f"{self.config.host}:{self.port}"

    async def check_database(self) -> bool:
        return await self.app.check_database()

    async def run_maintenance(self) -> None:
        await self.app.run_maintenance()

    async def stop(self, grace_s: float | None = None) -> None:
        """Graceful shutdown: not serving, drain workers, stop with grace, close the store."""
        if self.stopped:
            return
        self.stopped = True
        if self.tls_watch is not None:
            self.tls_watch.cancel()
        await self.grpc.health.draining()  # first, so no new traffic is routed here
        drain_s = self.config.drain_timeout_s if grace_s is None else grace_s
        await self.app.drain(drain_s)
        if self.dashboard is not None:
            await self.dashboard.stop()
        await self.app.stop_background()
        await self.grpc.stop(grace_s=min(drain_s, 5.0))
        if self.metrics_server is not None:
            await self.metrics_server.close()
        self.app.close()
        log.info("coordinator stopped")


def metrics_tls_context(config: CoordinatorConfig, tls: TlsReloader | None) -> ssl.SSLContext | None:
    """With ``metrics_tls``, the API's certificate for ``/metrics`` too, renewed with it,
    and its client CA: under mutual TLS a scraper needs a client certificate like any
    other client."""
    if not config.metrics_tls or tls is None:
        return None
    return tls.server_context()


async def _serve_metrics(app: Coordinator, tls: ssl.SSLContext | None) -> MetricsHttpServer:
    config = app.config
    assert config.metrics_port is not None
    limits = MetricsHttpLimits(
        max_connections=config.metrics_max_connections,
        max_header_bytes=config.metrics_max_header_bytes,
        idle_timeout_s=config.metrics_idle_timeout_s,
    )
    server = await serve_metrics(
        app.metrics.registry,
        config.host,
        config.metrics_port,
        limits=limits,
        ssl_context=tls,
        token=config.metrics_token,
    )
    scheme = "https" if tls is not None else "http"
    log.info("metrics on %s://%s:%d/metrics", scheme, config.host, server.port)
    return server


def _write_token_file(path: str, token: str) -> None:
    """Writes the token readable by this user only, replacing the file atomically."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    os.replace(partial, target)


async def start_coordinator(
    config: CoordinatorConfig,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    rng: random.Random | None = None,
) -> RunningCoordinator:
    """Opens the store (creating SQLite on first start), binds and starts serving.

    Raises ConfigError for an unsafe configuration (authentication off on a non-loopback
    address, half-configured TLS) and OSError when a TLS file cannot be read or a port
    cannot be bound.
    """
    check_security(config)
    tls = tls_reloader(config)  # read first: a bad path fails before anything starts
    metrics_tls = metrics_tls_context(config, tls)
    # Probes get answers while the store opens (and SQLite migrates): alive, not ready.
    early_health = await bind_health(config)
    try:
        app = await Coordinator.open(config, clock=clock, store=store, rng=rng)
    except BaseException:
        await early_health.stop()
        raise
    try:
        if app.bootstrap_token is not None and config.admin_token_file:
            await asyncio.to_thread(_write_token_file, config.admin_token_file, app.bootstrap_token)
            log.info("bootstrap admin token written to %s", config.admin_token_file)
        servers = await serve_grpc(app, tls, early_health)
    except BaseException:
        await early_health.stop()
        app.close()
        raise
    dashboard = None
    metrics_server = None
    try:
        if config.dashboard_port is not None:
            dashboard = await serve_dashboard(app)
        if config.metrics_port is not None:
            metrics_server = await _serve_metrics(app, metrics_tls)
    except OSError:
        if dashboard is not None:
            await dashboard.stop()
        await servers.stop(grace_s=0)
        app.close()
        raise
    app.start()
    tls_watch = _watch_tls(config, tls, dashboard, metrics_tls)
    metrics_port = metrics_server.port if metrics_server is not None else None
    log.info(
        "coordinator listening on %s:%d (%s); health port %s, scaler port %s, metrics port %s, "
        "dashboard port %s",
        config.host,
        servers.port,
        "postgresql" if app.store.postgres else "sqlite",
        servers.health_port if servers.health_port is not None else "off",
        servers.scaler_port if servers.scaler_port is not None else "off",
        metrics_port if metrics_port is not None else "off",
        dashboard.port if dashboard is not None else "off",
    )
    return RunningCoordinator(app, servers, metrics_port, dashboard, metrics_server, tls, tls_watch)


def _watch_tls(
    config: CoordinatorConfig,
    tls: TlsReloader | None,
    dashboard: DashboardServer | None,
    metrics_tls: ssl.SSLContext | None,
) -> asyncio.Task[None] | None:
    """Renewed TLS files for the HTTPS servers, which have no hook on their handshakes
    (the API port re-reads them on its own)."""
    if tls is None:
        return None
    dashboard_tls = dashboard.ssl_context if dashboard is not None else None
    if dashboard_tls is not None:
        tls.follow(dashboard_tls, client_ca=False)  # the dashboard signs in with tokens
    if dashboard_tls is None and metrics_tls is None:
        return None
    return asyncio.create_task(tls.watch(config.tls_reload_interval_s), name="runwick-tls-reload")
