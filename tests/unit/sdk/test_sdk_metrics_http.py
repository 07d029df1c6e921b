"""The ``/metrics`` HTTP server of the SDK and the coordinator, on a real loopback socket:
what it answers, what it refuses before rendering anything, and keep-alive."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from worker_sdk import MetricsHttpLimits
from worker_sdk._metrics_http import MetricsHttpServer, serve_metrics

TOKEN = "a-scrape-token-of-some-length"


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("runwick_test_things_total", "Things.", registry=registry).inc(3)
    return registry


@pytest.fixture
async def server(registry: CollectorRegistry) -> AsyncIterator[MetricsHttpServer]:
    started = await serve_metrics(registry, "127.0.0.1", 0, limits=MetricsHttpLimits(idle_timeout_s=5))
    yield started
    await started.close()


async def exchange(port: int, request: bytes) -> bytes:
    """Sends ``request`` on a new connection and reads until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()


def get(path: str = "/metrics", *headers: str, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test", *headers, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def test_metrics_are_served_in_the_text_format_and_gzipped_on_request(
    server: MetricsHttpServer,
) -> None:
    answer = await exchange(server.port, get())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Type: text/plain" in head
    assert b"runwick_test_things_total 3.0" in body
    zipped = await exchange(server.port, get("/metrics?x=1", "Accept-Encoding: gzip"))
    head, _, body = zipped.partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head
    assert b"runwick_test_things_total 3.0" in gzip.decompress(body)
    openmetrics = await exchange(server.port, get("/metrics", "Accept: application/openmetrics-text"))
    assert b"application/openmetrics-text" in openmetrics and openmetrics.endswith(b"# EOF\n")


async def test_head_answers_without_a_body(server: MetricsHttpServer) -> None:
    answer = await exchange(server.port, get(method="HEAD"))
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (get("/"), b"404"),
        (get("/metrics/../secret"), b"404"),
        (get(method="POST"), b"405"),
        (b"GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", b"400"),
        (b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"400"),
        (b"GET /metrics\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", b"400"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"),
    ],
    ids=["root", "other-path", "post", "body", "chunked", "http-0.9", "bad-header", "binary"],
)
async def test_what_is_not_a_scrape_is_refused_and_renders_nothing(
    server: MetricsHttpServer, request_bytes: bytes, status: bytes
) -> None:
    answer = await exchange(server.port, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status)
    assert b"runwick_test" not in answer


async def test_a_kept_alive_connection_serves_several_scrapes(server: MetricsHttpServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        for _ in range(3):
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            assert head.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" not in head
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            assert b"runwick_test_things_total" in await reader.readexactly(length)
        assert server.open_connections == 1
    finally:
        writer.close()


async def test_with_a_token_only_a_scrape_that_sends_it_is_answered(registry: CollectorRegistry) -> None:
    server = await serve_metrics(registry, "127.0.0.1", 0, token=TOKEN)
    try:
        for headers in ((), ("Authorization: Bearer wrong",), (f"Authorization: Basic {TOKEN}",)):
            refused = await exchange(server.port, get("/metrics", *headers))
            assert refused.startswith(b"HTTP/1.1 401") and b"WWW-Authenticate: Bearer" in refused
            assert b"runwick_test" not in refused
        answered = await exchange(server.port, get("/metrics", f"Authorization: bearer {TOKEN}"))
        assert answered.startswith(b"HTTP/1.1 200 OK") and b"runwick_test_things_total" in answered
    finally:
        await server.close()


async def test_a_port_in_use_is_a_clear_error(server: MetricsHttpServer, registry: CollectorRegistry) -> None:
    with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{server.port}"):
        await serve_metrics(registry, "127.0.0.1", server.port)


async def test_counters_and_histograms_come_without_created_series(
    server: MetricsHttpServer, registry: CollectorRegistry
) -> None:
    """prometheus_client adds a ``_created`` series to every counter and histogram series:
    twice the series, for a start time nothing reads. They are left out of scrapes."""
    Histogram("runwick_test_seconds", "Durations.", registry=registry).observe(0.2)
    assert any(s.name.endswith("_created") for family in registry.collect() for s in family.samples)
    for accept in ("text/plain", "application/openmetrics-text"):
        answer = await exchange(server.port, get("/metrics", f"Accept: {accept}"))
        body = answer.partition(b"\r\n\r\n")[2]
        assert b"runwick_test_things_total 3.0" in body and b"runwick_test_seconds_count 1.0" in body
        assert b"_created" not in body
