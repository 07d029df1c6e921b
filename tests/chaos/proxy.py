"""A small TCP proxy for the chaos suite (asyncio, runs in the test process).

Workers and producers connect to the proxy; it forwards each connection to the first
upstream coordinator that accepts it (so a killed replica's clients fail over to another).
The nemesis can:

- ``drop()``: abort every connection at once (both sides see a reset);
- ``delay(ms)``: hold every byte that long before forwarding it (order kept);
- ``partition()``: go half-open: connections stay open, new ones are accepted, but no
  byte is forwarded until ``heal(resume=True)`` (what was held then arrives late, as
  after a healed network partition) or ``heal(resume=False)`` (everything is dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

CHUNK = 65_536
CONNECT_TIMEOUT_S = 2.0


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream."""

    transports: list[asyncio.WriteTransport] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for transport in self.transports:
            transport.abort()


class ChaosProxy:
    def __init__(self, name: str, upstreams: Callable[[], list[str]]) -> None:
        self.name = name
        self._upstreams = upstreams
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.delay_s = 0.0
        self.connections = 0
        self.refused = 0
        self.bytes_forwarded = 0
        self.port = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def partitioned(self) -> bool:
        return not self._flowing.is_set()

    async def start(self) -> ChaosProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
            for task in link.tasks:
                task.cancel()
        tasks = [task for link in self._links for task in link.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        self._links.clear()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    # -- faults -------------------------------------------------------------------------

    def drop(self) -> int:
        """Aborts every open connection; returns how many."""
        links = list(self._links)
        for link in links:
            link.abort()
        return len(links)

    def delay(self, ms: float) -> None:
        self.delay_s = max(ms, 0) / 1000

    def partition(self) -> None:
        self._flowing.clear()

    def heal(self, *, resume: bool = True) -> None:
        """Ends a partition: resume forwarding what was held, or drop everything first."""
        if not resume:
            self.drop()
        self._flowing.set()

    def normal(self) -> None:
        """No delay, no partition (held bytes flow on)."""
        self.delay_s = 0.0
        self._flowing.set()

    # -- forwarding ---------------------------------------------------------------------

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        upstream = await self._connect_upstream()
        if upstream is None:
            self.refused += 1
            client_writer.transport.abort()
            return
        up_reader, up_writer = upstream
        link = _Link([client_writer.transport, up_writer.transport])
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pipe(client_reader, up_writer, link)),
            asyncio.create_task(self._pipe(up_reader, client_writer, link)),
        ]
        try:
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            link.abort()
            self._links.discard(link)

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for address in self._upstreams():
            host, _, port = address.rpartition(":")
            try:
                return await asyncio.wait_for(asyncio.open_connection(host, int(port)), CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                continue
        return None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        """Reads as bytes come (so a partition holds them here, not in the sender) and
        writes each chunk once its delay is over and the proxy is not partitioned."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def read() -> None:
            try:
                while data := await reader.read(CHUNK):
                    queue.put_nowait((loop.time(), data))
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                queue.put_nowait(None)

        reading = asyncio.create_task(read())
        try:
            while (item := await queue.get()) is not None:
                received, data = item
                wait = received + self.delay_s - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._flowing.wait()
                writer.write(data)
                self.bytes_forwarded += len(data)
                await writer.drain()
        except (OSError, ConnectionError):
            pass
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            link.abort()
