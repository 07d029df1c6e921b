"""The suite's TCP proxy against an echo server: forwarding, fail-over to the next
upstream, drop, delay and half-open partitions."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.chaos.proxy import ChaosProxy

pytestmark = pytest.mark.chaos


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
    await server.wait_closed()


_opened: list[asyncio.StreamWriter] = []


@pytest.fixture(autouse=True)
async def _close_connections() -> AsyncIterator[None]:
    yield
    while _opened:
        writer = _opened.pop()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _connect(proxy: ChaosProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    _opened.append(writer)
    return reader, writer


async def _roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), 5)


async def test_forwards_and_fails_over_to_the_next_upstream(echo: str):
    dead = "127.0.0.1:1"  # nothing listens on port 1
    proxy = await ChaosProxy("p", lambda: [dead, echo]).start()
    try:
        reader, writer = await _connect(proxy)
        assert await _roundtrip(reader, writer, b"hello") == b"hello"
    finally:
        await proxy.close()


async def test_no_upstream_closes_the_connection():
    proxy = await ChaosProxy("p", lambda: ["127.0.0.1:1"]).start()
    try:
        reader, _writer = await _connect(proxy)
        assert await asyncio.wait_for(reader.read(10), 5) == b""
        assert proxy.refused == 1
    finally:
        await proxy.close()


async def test_drop_resets_every_connection(echo: str):
    proxy = await ChaosProxy("p", lambda: [echo]).start()
    try:
        reader, writer = await _connect(proxy)
        await _roundtrip(reader, writer, b"x")
        assert proxy.drop() == 1
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(10), 5) == b""
    finally:
        await proxy.close()


async def test_delay_holds_bytes_in_order(echo: str):
    proxy = await ChaosProxy("p", lambda: [echo]).start()
    try:
        reader, writer = await _connect(proxy)
        proxy.delay(300)
        loop = asyncio.get_running_loop()
        began = loop.time()
        writer.write(b"ab")
        writer.write(b"cd")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"abcd"
        assert loop.time() - began >= 0.3  # each way: at least the delay once
    finally:
        await proxy.close()


async def test_a_partition_holds_bytes_until_it_resumes(echo: str):
    proxy = await ChaosProxy("p", lambda: [echo]).start()
    try:
        reader, writer = await _connect(proxy)
        proxy.partition()
        writer.write(b"held")
        await writer.drain()
        read = asyncio.ensure_future(reader.readexactly(4))
        done, _ = await asyncio.wait({read}, timeout=0.3)
        assert not done  # open, silent: half-open
        proxy.heal(resume=True)
        assert await asyncio.wait_for(read, 5) == b"held"
    finally:
        await proxy.close()


async def test_a_partition_healed_by_dropping_loses_what_it_held(echo: str):
    proxy = await ChaosProxy("p", lambda: [echo]).start()
    try:
        reader, writer = await _connect(proxy)
        proxy.partition()
        writer.write(b"lost")
        await writer.drain()
        await asyncio.sleep(0.05)
        proxy.heal(resume=False)
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(10), 5) == b""
        reader, writer = await _connect(proxy)  # new connections work again
        assert await _roundtrip(reader, writer, b"fresh") == b"fresh"
    finally:
        await proxy.close()
