"""The checks every request passes before the dashboard does any work for it, from its
head alone: the ``Host`` it names (DNS rebinding), the ``Origin`` of a POST (cross-site
forms), the POST body's type and size; then ``admit`` (the sign-in limit, a session
cookie where one is needed); only then is the body read, capped and with a deadline, and
handed to the application in memory. Nothing is ever spooled to disk.

The dashboard's forms are URL-encoded and small: multipart (file uploads) is refused
(415), a body over ``max_form_bytes`` too (413), before a byte of it is read.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Callable, Iterable

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator.config import DashboardLimits, is_loopback

FORM_TYPE = "application/x-www-form-urlencoded"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_HOST = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::[0-9]{1,5})?$")
_BODILESS = frozenset({"GET", "HEAD"})
FOREIGN_ORIGIN = "Refused: this form was sent from another site (Origin mismatch)."
NOT_A_FORM = f"Unsupported body: the dashboard's forms are sent as {FORM_TYPE}."

Admit = Callable[[Request], Response | None]
"""Looks at a POST's head (path, cookies, client): a refusal, or None to go on."""


def allowed_hosts(host: str, extra: Iterable[str]) -> frozenset[str] | None:
    """The host names the dashboard answers on a bind to ``host``: ``host`` itself, the
    loopback names when ``host`` is loopback or a wildcard, and ``extra``. None (any)
    for a wildcard bind with no ``extra``: nothing names the hosts it is reached by."""
    bound = host.strip("[]").lower()
    listed = {name.strip().strip("[]").lower() for name in extra if name.strip()}
    try:
        wildcard = ipaddress.ip_address(bound).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard:
        return frozenset(listed | LOOPBACK_HOSTS) if listed else None
    names = {bound, *listed}
    if is_loopback(bound):
        names |= LOOPBACK_HOSTS
    return frozenset(names)


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header (no port, no brackets, lower case), or None when it
    is not a host name or address."""
    match = _HOST.match(header.strip().lower())
    return match.group(1).strip("[]") if match else None


def refusal(status: int, message: str, *, close: bool = False, **headers: str) -> Response:
    """A plain-text refusal; ``close`` ends the connection after it (a body was left
    unread, so the connection cannot carry another request)."""
    if close:
        headers["connection"] = "close"
    return PlainTextResponse(message + "\n", status_code=status, headers=headers)


class RequestGuard:
    """Pure ASGI middleware: refuses from the request head, then reads a POST's body
    within its bounds and passes it on."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str] | None,
        tls: bool,
        limits: DashboardLimits,
        admit: Admit,
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.scheme = "https" if tls else "http"
        self.limits = limits
        self.admit = admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = self.check_head(request)
        if refused is None and request.method == "POST":
            refused = self.admit(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if request.method in _BODILESS:
            await self.app(scope, receive, send)
            return
        body = await self._read_body(receive)
        if isinstance(body, Response):
            await body(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def check_head(self, request: Request) -> Response | None:
        headers = request.headers
        host = headers.get("host", "")
        name = host_name(host)
        if name is None:
            return refusal(400, "Bad request: a Host header naming this dashboard is required.", close=True)
        if self.hosts is not None and name not in self.hosts:
            return refusal(
                421,
                f"This dashboard does not answer to the host name {name!r}; reach it by the name it is "
                "served under (see --dashboard-allowed-host).",
                close=True,
            )
        if request.method in _BODILESS:
            return None
        if request.method != "POST":
            return refusal(405, "Method not allowed.", close=True, allow="GET, HEAD, POST")
        origin = headers.get("origin")
        if origin is None:
            # Browsers send Origin with every POST; one that says where it is (Sec-Fetch-*)
            # but names no origin is not to be trusted. Other clients (scripts) need none.
            if any(key.startswith("sec-fetch-") for key in headers):
                return refusal(403, "Refused: this form was sent without its Origin.", close=True)
        elif origin.lower() != f"{self.scheme}://{host.strip().lower()}":
            return refusal(403, FOREIGN_ORIGIN, close=True)
        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != FORM_TYPE:
            return refusal(415, NOT_A_FORM, close=True)
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limits.max_form_bytes):
            return refusal(413, f"The form is larger than {self.limits.max_form_bytes} bytes.", close=True)
        return None

    async def _read_body(self, receive: Receive) -> bytes | Response:
        """The whole body, or the refusal when it runs past the size or the deadline."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":  # the client went away
                        return refusal(400, "The request ended before its body.", close=True)
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limits.max_form_bytes:
                        return refusal(
                            413, f"The form is larger than {self.limits.max_form_bytes} bytes.", close=True
                        )
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            return refusal(408, "The form took too long to arrive.", close=True)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then whatever comes next (a
    disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
