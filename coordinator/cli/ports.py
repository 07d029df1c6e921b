"""Before ``serve`` opens its database: are the ports it will listen on free? A second
coordinator started beside a running one must say which flag to change, not print gRPC
core's ``add_port.cc`` line after it has already created and migrated a database."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports no server module before a server command runs
    from coordinator.config import CoordinatorConfig


def busy_port(config: CoordinatorConfig) -> str | None:
    """What to say when a port ``config`` names is taken (or may not be bound), else None.
    Port 0 (any free one) and ports turned off are not checked. A probe can race with
    another process binding the port right after: the server's own bind still fails then."""
    ports = (
        ("--port", config.port),
        ("--health-port", config.health_port),
        ("--scaler-port", config.scaler_port),
        ("--metrics-port", config.metrics_port),
        ("--dashboard-port", config.dashboard_port),
        ("--scaler-port", config.scaler_port),
    )
    for flag, port in ports:
        if not port:
            continue
        problem = _bind_problem(config.host, port)
        if problem is not None:
            return (
                f"port {port} on {config.host} ({flag}) cannot be used: {problem}; is another "
                f"coordinator running? Stop it, or choose another port with {flag} (0 = any free one)"
            )
    return None


def _bind_problem(host: str, port: int) -> str | None:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError:
        return None  # a host that does not resolve is the server's to report
    with socket.socket(family, kind, proto) as probe:
        # A port whose last connections linger in TIME_WAIT is free to listen on (the
        # server sets SO_REUSEADDR too); one a process listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None
