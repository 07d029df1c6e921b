"""The gRPC side of the coordinator: the API server (JobService, WorkerService,
AdminService, health and reflection) over the facade, and optionally a plaintext port
serving only health for Kubernetes probes, and optionally a port serving only KEDA's
external scaler (``api.scaler``, docs/autoscaling.md).

``await serve_grpc(app, tls) -> GrpcServers`` binds (port 0 picks a free port, which
``.port`` reports) and starts; ``await servers.stop(grace_s)`` stops them.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coordinator.api.admin_servicer import AdminServicer
from coordinator.api.auth import AuthInterceptor
from coordinator.api.errors import ErrorInterceptor
from coordinator.api.health import Health
from coordinator.api.ingress import SMALL_REQUEST_BYTES, IngressInterceptor, request_limits
from coordinator.api.job_servicer import JobServicer
from coordinator.api.metrics_interceptor import MetricsInterceptor
from coordinator.api.scaler import ScalerServicer
from coordinator.api.tls import TlsFiles, TlsReloader
from coordinator.api.worker_servicer import WorkerServicer
from coordinator.app import Coordinator
from coordinator.config import CoordinatorConfig
from worker_sdk.proto.keda import externalscaler_pb2_grpc
from worker_sdk.proto.runwick.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

SERVICE_NAMES = (
    job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
)


@dataclass
class HealthPort:
    """The health state and, when configured, the plaintext port serving it to probes;
    bound before the store opens (``bind_health``)."""

    health: Health
    server: grpc.aio.Server | None = None
    port: int | None = None

    async def stop(self) -> None:
        await self.health.stop()
        if self.server is not None:
            await self.server.stop(grace=None)


async def bind_health(config: CoordinatorConfig) -> HealthPort:
    """Binds and starts the plaintext health port (when ``config.health_port`` is set)
    answering liveness SERVING and readiness NOT_SERVING until ``serve_grpc`` starts.

    Raises OSError when the port cannot be bound.
    """
    state = Health(SERVICE_NAMES, config.ingress.max_health_watches)
    early = HealthPort(state)
    if config.health_port is not None:
        # Plaintext and health only, for Kubernetes' gRPC probes whatever the API port uses.
        early.server = grpc.aio.server(
            options=health_server_options(config),
            maximum_concurrent_rpcs=config.ingress.max_concurrent_rpcs,
        )
        health_pb2_grpc.add_HealthServicer_to_server(state.probes, early.server)
        early.port = _bind(early.server, config.host, config.health_port)
        await early.server.start()
    await state.starting()
    return early


@dataclass
class GrpcServers:
    server: grpc.aio.Server
    port: int
    health_port_state: HealthPort
    scaler_server: grpc.aio.Server | None = None
    scaler_port: int | None = None
    """The port serving KEDA's external scaler, when one is served."""

    @property
    def health(self) -> Health:
        return self.health_port_state.health

    @property
    def health_port(self) -> int | None:
        """The plaintext health port, when one is served."""
        return self.health_port_state.port

    async def stop(self, grace_s: float) -> None:
        if self.scaler_server is not None:
            await self.scaler_server.stop(grace=None)  # its streams hold no work to finish
        await self.server.stop(grace=grace_s)
        await self.health_port_state.stop()


async def serve_grpc(
    app: Coordinator, tls: TlsReloader | None, early_health: HealthPort | None = None
) -> GrpcServers:
    """Binds and starts the API server, with credentials from ``tls`` (``tls_reloader(config)``) on the
    API port, and turns readiness on. ``early_health`` is the health port bound earlier
    (``bind_health``); without it the health port is bound here.

    Raises OSError when a port cannot be bound.
    """
    config = app.config
    early = early_health if early_health is not None else await bind_health(config)
    server = grpc.aio.server(
        # Metrics first: it sees the status the interceptors after it settle on. Auth
        # before the request limits: a call it refuses is never read at all.
        interceptors=[
            MetricsInterceptor(app.metrics),
            AuthInterceptor(app if config.auth_enabled else None),
            ErrorInterceptor(),
            IngressInterceptor(request_limits(config.bounds, config.message_limit_bytes())),
        ],
        options=server_options(config),
        # One call past it is answered RESOURCE_EXHAUSTED at once, unread.
        maximum_concurrent_rpcs=config.ingress.max_concurrent_rpcs,
    )
    job_service_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(app), server)
    admin_service_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(app), server)
    worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(
        WorkerServicer(
            app,
            f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
            config.hello_timeout_s,
            max_stream_age_s=config.max_connection_age_ms / 1000,
        ),
        server,
    )
    health_state = early.health
    health_pb2_grpc.add_HealthServicer_to_server(health_state.api, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    scaler = scaler_server(app) if config.scaler_port is not None else None
    try:
        port = _bind(server, config.host, config.port, tls.grpc_credentials() if tls else None)
        scaler_tls = tls.grpc_credentials() if tls and scaler else None
        scaler_port = _bind(scaler, config.host, config.scaler_port or 0, scaler_tls) if scaler else None
    except OSError:
        if early_health is None:
            await early.stop()
        raise
    app.on_readiness(health_state.database_checked)
    await server.start()
    if scaler is not None:
        await scaler.start()
    await health_state.start()
    return GrpcServers(server, port, early, scaler, scaler_port)


def scaler_server(app: Coordinator) -> grpc.aio.Server:
    """The scaler port's server: KEDA's external scaler only, without a token (KEDA sends
    none; the port's TLS is its guard), errors as on the API port, requests of at most
    ``max_request_bytes``."""
    config = app.config
    server = grpc.aio.server(
        interceptors=[ErrorInterceptor()],
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", config.scaler.max_request_bytes),
            *_connection_caps(config),
        ],
        maximum_concurrent_rpcs=config.ingress.max_concurrent_rpcs,
    )
    externalscaler_pb2_grpc.add_ExternalScalerServicer_to_server(ScalerServicer(app, config.scaler), server)
    return server


def server_options(config: CoordinatorConfig) -> list[tuple[str, Any]]:
    """The API server's channel options (docs/scaling.md: keepalive, sizes, connection age)."""
    return [
        # A second server on the port must fail, not steal traffic, unless it is one of
        # the processes of one ``serve --processes N`` (``share_port``).
        ("grpc.so_reuseport", int(config.share_port)),
        # Sized from the bounds (docs/limits.md): a valid request never hits the transport limit
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
        *_connection_caps(config),
    ]


def health_server_options(config: CoordinatorConfig) -> list[tuple[str, Any]]:
    """The plaintext health port's channel options: health requests are a service name."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", SMALL_REQUEST_BYTES),
        *_connection_caps(config),
    ]


def _connection_caps(config: CoordinatorConfig) -> list[tuple[str, Any]]:
    return [
        # Counted by gRPC from accept to close: a connection past it is closed at once.
        # (It frees its place when the socket closes; a client that keeps a closed
        # channel's call objects keeps its socket open, and so its place.)
        ("grpc.max_allowed_incoming_connections", config.ingress.max_connections),
        # HTTP/2 MAX_CONCURRENT_STREAMS: a client's calls past it wait on its side.
        ("grpc.max_concurrent_streams", config.ingress.max_streams_per_connection),
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


def tls_reloader(config: CoordinatorConfig) -> TlsReloader | None:
    """The API port's TLS files, when configured, re-read when they change (cert-manager
    renewals need no restart); with a client CA, client certificates are required
    (mutual TLS). Raises OSError when a file cannot be read or they do not load."""
    if not config.tls_cert_file or not config.tls_key_file:
        return None
    return TlsReloader(TlsFiles(config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file))
