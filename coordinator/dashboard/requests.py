"""What every view is given: the signed-in ``Visitor`` and the ``Host`` it renders with,
and the small request helpers views and the application share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from coordinator.app import Coordinator
from coordinator.dashboard.render import Renderer
from coordinator.domain.access import Actor, Principal, Scope


@dataclass(frozen=True, slots=True)
class Visitor:
    """The signed-in operator of one request."""

    principal: Principal
    csrf: str
    """The CSRF token this operator's forms carry."""
    peer: str
    """Where the request came from, for audit events (``ipv4:10.0.0.7:51234 (dashboard)``)."""

    @property
    def actor(self) -> Actor:
        return Actor(self.principal, self.peer)

    def allows(self, scope: Scope) -> bool:
        return self.principal.allows(scope)


class Host(Protocol):
    """What views use of the dashboard: the facade, the templates, the shared context."""

    app: Coordinator
    renderer: Renderer

    def context(self, request: Request, visitor: Visitor | None, **values: Any) -> dict[str, Any]: ...


View = Callable[[Host, Request, Visitor], Awaitable[Response]]


def is_fragment(request: Request) -> bool:
    """A live region's refresh (``?fragment=1``) rather than the whole page."""
    return request.query_params.get("fragment") == "1"


def live_url(request: Request) -> str:
    """This page's URL as its live region reads it."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k not in ("fragment", "notice")]
    query.append(("fragment", "1"))
    return request.url.path + "?" + "&".join(f"{quote(k)}={quote(v, safe='')}" for k, v in query)


def peer(request: Request) -> str:
    """The client's address in the gRPC API's notation, marked as the dashboard's."""
    client = request.client
    if client is None:
        return "unknown (dashboard)"
    host = client.host
    if ":" in host:
        return f"ipv6:[{host}]:{client.port} (dashboard)"
    return f"ipv4:{host}:{client.port} (dashboard)"


def local_path(value: str | None) -> str:
    """``value`` when it is a path on this site, else ``/`` (no open redirects)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value
