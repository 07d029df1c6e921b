"""The dashboard's HTTP server: uvicorn on the coordinator's own event loop.

``await serve_dashboard(app) -> DashboardServer`` binds ``config.host`` and
``config.dashboard_port`` (0 picks a free port, which ``.port`` reports), with TLS when
the API has a certificate, and serves until ``await server.stop()``. The coordinator
process owns the signals: this server installs no handlers of its own.

The port is bounded (``DashboardLimits``): connections at once, the size of a request
head, and how long a connection may sit without sending one, so idle or trickling
clients cannot hold the process's file descriptors, which the gRPC API needs too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Iterator

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from coordinator.app import Coordinator
from coordinator.config import DashboardLimits
from coordinator.dashboard.web import build_app

STARTUP_TIMEOUT_S = 10.0
STOP_GRACE_S = 2.0
"""How long open requests (and idle keep-alive connections) get when the server stops."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # SIGTERM and SIGINT belong to the coordinator process (graceful drain).
        yield


class _BoundedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with two more bounds. uvicorn times out keep-alive
    only after a response and restarts that timer on every byte received, so a client
    that connects and sends nothing, or sends its head a byte at a time, is never closed:
    here each connection must complete a request head within ``timeout_keep_alive`` of
    opening or of its last response, bytes or not. And past ``max_connections`` open
    connections a new one is closed at once instead of held open."""

    _head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = self.limit_concurrency  # max_connections + 1: uvicorn's 503 starts at the limit
        if limit is not None and len(self.connections) >= limit:
            transport.close()
            return
        self._arm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        if not self.transport.is_closing():
            self._head_deadline = self.loop.call_later(self.timeout_keep_alive, self._head_deadline_passed)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_deadline_passed(self) -> None:
        self._head_deadline = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered: its body has its own deadline (guard)
        if not self.transport.is_closing():
            self.transport.close()


class DashboardServer:
    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None], port: int) -> None:
        self._server = server
        self._task = task
        self.port = port
        """The bound port (the one chosen, with port 0)."""

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context new HTTPS connections are made with (None over plain HTTP): a
        certificate loaded into it serves new connections without a restart."""
        context = self._server.config.ssl
        return context if isinstance(context, ssl.SSLContext) else None

    async def stop(self) -> None:
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so asyncio turns Nagle off on accepted connections (it checks
    # the protocol): else a response's header and body writes wait on delayed ACKs.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_dashboard(app: Coordinator) -> DashboardServer:
    """Binds and starts the dashboard. Raises OSError when the port cannot be bound or a
    TLS file cannot be read."""
    config = app.config
    assert config.dashboard_port is not None
    # uvicorn reports its own start and stop at INFO on a logger named "uvicorn.error";
    # the coordinator's log says when the dashboard listens. Failures still show.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    tls = bool(config.tls_cert_file and config.tls_key_file)
    limits: DashboardLimits = config.dashboard_limits
    sock = _bind(config.host, config.dashboard_port, limits.backlog)
    try:
        uvicorn_config = uvicorn.Config(
            build_app(app, tls=tls),
            http=_BoundedH11Protocol,
            ws="none",
            limit_concurrency=limits.max_connections + 1,
            timeout_keep_alive=limits.idle_timeout_s,
            h11_max_incomplete_event_size=limits.max_header_bytes,
            backlog=limits.backlog,
            log_config=None,
            access_log=False,
            lifespan="off",
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=int(STOP_GRACE_S),
            ssl_certfile=config.tls_cert_file if tls else None,
            ssl_keyfile=config.tls_key_file if tls else None,
        )
        uvicorn_config.load()  # reads the TLS files now: a bad one fails the start
    except BaseException:
        sock.close()
        raise
    server = _Server(uvicorn_config)
    port = int(sock.getsockname()[1])
    task = asyncio.create_task(server.serve(sockets=[sock]), name="runwick-dashboard")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STARTUP_TIMEOUT_S
    while not server.started:
        if task.done():
            sock.close()
            task.result()  # raises what stopped it
            raise OSError("the dashboard server stopped while starting")
        if loop.time() > deadline:
            server.should_exit = True
            raise OSError("the dashboard server did not start")
        await asyncio.sleep(0.01)
    return DashboardServer(server, task, port)
