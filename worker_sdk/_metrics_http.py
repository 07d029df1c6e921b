"""A small ``/metrics`` HTTP server on the caller's asyncio loop (the worker's and the
coordinator's), in place of prometheus_client's ``start_http_server``, which runs a
thread per connection and waits on a client for ever.

Here a connection is a task, not a thread, and every client-controlled input is bounded
before work is done for it: connections held at once (more are closed as they come),
the size of a request head, and the time a connection may take to send a whole request
or to read its answer. Rendering the registry is the one slow step: it runs on a
thread, one scrape at a time, so the loop keeps serving. Optionally the port speaks
TLS only (mutual TLS when the context asks for client certificates) and every scrape
must send a bearer token.
"""

from __future__ import annotations

import asyncio
import gzip
import hmac
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # prometheus_client's package import costs ~80 ms (its exposition pulls in
    # http.server); ``import worker_sdk`` must not pay it, so it loads at the first scrape.
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

METRICS_PATH = "/metrics"
HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True, slots=True)
class MetricsHttpLimits:
    """Bounds of one ``/metrics`` server."""

    max_connections: int = 32
    """Connections held open at once (scrapers keep theirs alive); past it a new
    connection is closed at once, unread."""
    max_header_bytes: int = 8192
    """Largest request head (request line and headers); a longer one gets 431."""
    idle_timeout_s: float = 10.0
    """How long a connection may take for its TLS handshake, to send a whole request
    head, or to read an answer, and how long a kept-alive one may wait for its next
    request; then it is closed."""


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    keep_alive: bool


class _BadRequest(Exception):
    """A request this server will not answer with metrics: answered with ``status``."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class WithoutCreated:
    """A registry's metrics without the ``_created`` series prometheus_client adds to every
    counter and histogram: one more series per series, holding a start time that no
    dashboard or alert reads (``rate()`` needs none)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import Metric

        for family in self.registry.collect():
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [sample for sample in family.samples if not sample.name.endswith("_created")]
            yield kept


class MetricsHttpServer:
    """Serves ``registry`` at ``/metrics`` (GET or HEAD) from ``start`` to ``close``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        limits: MetricsHttpLimits | None = None,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        self.registry = registry
        self.limits = limits if limits is not None else MetricsHttpLimits()
        self._ssl = ssl_context
        self._expected_authorization = None if token is None else f"Bearer {token}".encode()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.BaseTransport] = {}
        self._render_lock = asyncio.Lock()
        self.port = 0

    @property
    def open_connections(self) -> int:
        """Connections being served now (tests read it)."""
        return len(self._connections)

    async def start(self, host: str, port: int) -> int:
        """Listens on ``host:port`` (0 picks a free port) and returns the bound port;
        raises OSError when it cannot be bound."""
        loop = asyncio.get_running_loop()
        found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        # One socket for the first address only: a name with several (localhost: IPv4
        # and IPv6) would otherwise get a different free port on each.
        family, *_, address = found[0]
        listener = socket.create_server(address[:2], family=family)
        try:
            self._server = await loop.create_server(lambda: _Gate(self._accept), sock=listener)
        except BaseException:
            listener.close()
            raise
        self.port = int(listener.getsockname()[1])
        return self.port

    async def close(self) -> None:
        """Stops listening and closes every open connection."""
        if self._server is None:
            return
        self._server.close()
        for transport in list(self._connections.values()):
            _abort(transport)
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    def _accept(self, transport: asyncio.Transport) -> None:
        if len(self._connections) >= self.limits.max_connections:
            transport.abort()  # before any read or handshake: a flood costs no more than this
            return
        task = asyncio.get_running_loop().create_task(self._serve(transport), name="runwick-metrics-http")
        self._connections[task] = transport

    async def _serve(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None and isinstance(transport, asyncio.Transport)
        reader = asyncio.StreamReader(limit=self.limits.max_header_bytes, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        idle_s = self.limits.idle_timeout_s
        try:
            if self._ssl is not None:
                handshake = loop.start_tls(
                    transport, protocol, self._ssl, server_side=True, ssl_handshake_timeout=idle_s
                )
                secured = await asyncio.wait_for(handshake, idle_s + 1)
                if secured is None:
                    return
                transport = self._connections[task] = secured
            else:
                transport.set_protocol(protocol)
                protocol.connection_made(transport)
                transport.resume_reading()
            assert isinstance(transport, asyncio.Transport)
            # Held here, past the ``finally`` that closes its transport: a writer that
            # goes away with its transport open warns.
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._converse(reader, writer)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, OSError):
            pass  # the client went, stalled or spoke no TLS: nothing to answer
        finally:
            del self._connections[task]
            _abort(transport)

    async def _converse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        idle_s = self.limits.idle_timeout_s
        while True:
            try:
                head = await asyncio.wait_for(reader.readuntil(HEAD_END), idle_s)
                request = _parse(head)
            except asyncio.LimitOverrunError:
                await self._send(writer, "431 Request Header Fields Too Large", keep_alive=False)
                return
            except _BadRequest as refused:
                await self._send(writer, refused.status, keep_alive=False)
                return
            status, extra, body = await self._answer(request)
            await self._send(
                writer, status, extra, body, keep_alive=request.keep_alive, head=request.method == "HEAD"
            )
            if not request.keep_alive:
                return

    async def _answer(self, request: _Request) -> tuple[str, dict[str, str], bytes]:
        if request.path != METRICS_PATH:
            return "404 Not Found", {}, b""
        if not self._authorized(request.headers.get("authorization", "")):
            return "401 Unauthorized", {"WWW-Authenticate": 'Bearer realm="metrics"'}, b""
        accept = request.headers.get("accept", "")
        gzipped = "gzip" in request.headers.get("accept-encoding", "")
        async with self._render_lock:  # one render at a time: one thread, whatever comes
            content_type, body = await asyncio.to_thread(self._render, accept, gzipped)
        extra = {"Content-Type": content_type}
        if gzipped:
            extra["Content-Encoding"] = "gzip"
        return "200 OK", extra, body

    def _authorized(self, authorization: str) -> bool:
        if self._expected_authorization is None:
            return True
        scheme, _, credentials = authorization.partition(" ")
        offered = f"Bearer {credentials.strip()}".encode() if scheme.lower() == "bearer" else b""
        return hmac.compare_digest(offered, self._expected_authorization)

    def _render(self, accept: str, gzipped: bool) -> tuple[str, bytes]:
        from prometheus_client.exposition import choose_encoder

        encoder, content_type = choose_encoder(accept)
        body: bytes = encoder(WithoutCreated(self.registry))
        return content_type, gzip.compress(body) if gzipped else body

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: str,
        extra: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        keep_alive: bool,
        head: bool = False,
    ) -> None:
        lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (extra or {}).items()]
        if not keep_alive:
            lines.append("Connection: close")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        if not head:
            writer.write(body)
        await asyncio.wait_for(writer.drain(), self.limits.idle_timeout_s)


class _Gate(asyncio.Protocol):
    """The protocol of a connection just accepted: it stops reading at once, so that no
    byte (a TLS ClientHello least of all) is read before the server has taken the
    connection, or closed it for being one too many."""

    def __init__(self, accepted: Callable[[asyncio.Transport], None]) -> None:
        self._accepted = accepted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        self._accepted(transport)


def _abort(transport: asyncio.BaseTransport) -> None:
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


def _parse(head: bytes) -> _Request:
    """The request in a head that ends with its blank line; raises _BadRequest for one
    this server does not take (a body, another method, not HTTP/1)."""
    request_line, *header_lines = head[: -len(HEAD_END)].decode("latin-1").split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest("400 Bad Request")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in header_lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise _BadRequest("400 Bad Request")
        headers[name.strip().lower()] = value.strip()
    if method not in ("GET", "HEAD"):
        raise _BadRequest("405 Method Not Allowed")
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        raise _BadRequest("400 Bad Request")  # a scrape has no body: none is read
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return _Request(method, target.split("?", 1)[0], headers, keep_alive)


async def serve_metrics(
    registry: CollectorRegistry,
    host: str,
    port: int,
    *,
    limits: MetricsHttpLimits | None = None,
    ssl_context: ssl.SSLContext | None = None,
    token: str | None = None,
) -> MetricsHttpServer:
    """A started ``MetricsHttpServer``; raises OSError naming the address when the port
    cannot be bound."""
    server = MetricsHttpServer(registry, limits=limits, ssl_context=ssl_context, token=token)
    try:
        await server.start(host, port)
    except OSError as exc:
        raise OSError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    return server
