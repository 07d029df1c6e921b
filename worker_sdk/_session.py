"""The stream to the coordinator: connect, Hello/Welcome, read, reconnect with backoff.

One ``WorkerService.Connect`` stream at a time. What to say and how to react lives in a
``StreamHandler`` (the worker's engine); this module only moves messages and keeps the
stream up: when it breaks, it waits an exponential, jittered delay and connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from types import AsyncGeneratorType
from typing import Any, Protocol

import grpc

from worker_sdk._batching import batchable, take_batch
from worker_sdk._errors import rpc_status
from worker_sdk._metrics import WorkerMetrics
from worker_sdk.proto.runwick.v1 import worker_service_pb2, worker_service_pb2_grpc

logger = logging.getLogger(__name__)

_CLOSE_GRACE_S = 1.0
"""How long ``close`` lets the coordinator end the stream after our half-close."""


class StreamHandler(Protocol):
    """What the session asks of the worker's protocol engine."""

    def hello(self) -> worker_service_pb2.ConnectRequest:
        """The Hello to open every stream with."""
        ...

    def on_ready(self, welcome: worker_service_pb2.Welcome) -> None:
        """The stream is welcomed; messages may be sent."""
        ...

    def on_message(self, message: worker_service_pb2.ConnectResponse) -> None:
        """A coordinator message arrived."""
        ...

    def on_closed(self) -> None:
        """The stream is gone; nothing can be sent until the next ``on_ready``."""
        ...


class ProtocolViolation(Exception):
    """The coordinator broke the stream protocol (e.g. no Welcome first)."""


class Session:
    """Keeps one Connect stream open and reconnects it when it breaks."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        handler: StreamHandler,
        *,
        metadata: tuple[tuple[str, str], ...],
        hello_timeout: timedelta,
        reconnect_initial_delay: timedelta,
        reconnect_max_delay: timedelta,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        self._metrics = metrics
        self._stub: Any = worker_service_pb2_grpc.WorkerServiceStub(channel)
        self._handler = handler
        self._metadata = metadata
        self._hello_timeout_s = hello_timeout.total_seconds()
        self._initial_delay_s = reconnect_initial_delay.total_seconds()
        self._max_delay_s = reconnect_max_delay.total_seconds()
        self._outbox: asyncio.Queue[worker_service_pb2.ConnectRequest | None] | None = None
        self._attempt: asyncio.Task[None] | None = None
        self._closing = False
        self._wake = asyncio.Event()
        self.generation = 0
        """Counts welcomed streams; tells one stream from the next."""

    @property
    def ready(self) -> bool:
        """True while a welcomed stream is open."""
        return self._outbox is not None

    def send(self, message: worker_service_pb2.ConnectRequest) -> bool:
        """Queues a message on the open stream; False (dropped) when there is none."""
        if self._outbox is None:
            return False
        self._outbox.put_nowait(message)
        return True

    def restart(self) -> None:
        """Drops the current stream; the run loop connects again after the backoff."""
        if self._attempt is not None and not self._attempt.done():
            self._attempt.cancel()

    async def close(self) -> None:
        """Half-closes the stream, lets the coordinator end it briefly, then stops."""
        self._closing = True
        self._wake.set()
        attempt = self._attempt
        if self._outbox is not None:
            self._outbox.put_nowait(None)
        if attempt is not None and not attempt.done():
            await asyncio.wait({attempt}, timeout=_CLOSE_GRACE_S)
            attempt.cancel()
            await asyncio.wait({attempt})

    async def run(self) -> None:
        """Connects, serves and reconnects until ``close``."""
        delay_s = self._initial_delay_s
        while not self._closing:
            generation = self.generation
            attempt = asyncio.create_task(self._serve_once())
            self._attempt = attempt
            try:
                await asyncio.wait({attempt})
            except asyncio.CancelledError:
                attempt.cancel()
                raise
            self._log_end(attempt)
            if self._closing:
                return
            if self.generation != generation:
                delay_s = self._initial_delay_s
            pause_s = random.uniform(delay_s / 2, delay_s)
            delay_s = min(delay_s * 2, self._max_delay_s)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause_s)
            if self._metrics is not None and not self._closing:
                self._metrics.reconnects.inc()

    async def _serve_once(self) -> None:
        outbox: asyncio.Queue[worker_service_pb2.ConnectRequest | None] = asyncio.Queue()
        outbox.put_nowait(self._handler.hello())
        # Requests go out through call.write from a task of our own, not a request
        # iterator: grpc cancels the task it runs an iterator in only while the call is
        # still open, so each stream the coordinator ended left that task (and the
        # generator it was inside) pending forever, and asyncio logged both as errors
        # once they were collected. Our writer is stopped however the call ends.
        call = self._stub.Connect(metadata=self._metadata)
        welcome = worker_service_pb2.Welcome()
        writer = asyncio.create_task(_write(call, outbox, welcome), name="runwick-stream-writer")
        responses: AsyncIterator[worker_service_pb2.ConnectResponse] = aiter(call)
        try:
            try:
                first = await asyncio.wait_for(anext(responses), self._hello_timeout_s)
            except StopAsyncIteration:
                raise ProtocolViolation("stream ended before Welcome") from None
            if first.WhichOneof("kind") != "welcome":
                raise ProtocolViolation(f"first message was {first.WhichOneof('kind')}, not welcome")
            self.generation += 1
            welcome.CopyFrom(first.welcome)  # the writer batches once the coordinator says so
            self._outbox = outbox
            if self._metrics is not None:
                self._metrics.connected.inc()
            logger.info("connected to coordinator %s", first.welcome.coordinator_id)
            self._handler.on_ready(first.welcome)
            async for message in responses:
                self._handler.on_message(message)
        finally:
            was_ready = self._outbox is outbox
            self._outbox = None
            if was_ready:
                if self._metrics is not None:
                    self._metrics.connected.dec()
                self._handler.on_closed()
            await _end_call(call, writer, responses)

    def _log_end(self, attempt: asyncio.Task[None]) -> None:
        if attempt.cancelled():
            if not self._closing:
                logger.info("stream to the coordinator restarted")
            return
        error = attempt.exception()
        if error is None:
            if not self._closing:
                logger.info("coordinator ended the stream; reconnecting")
        elif isinstance(error, grpc.RpcError):
            logger.warning("stream to the coordinator failed (%s); reconnecting", rpc_status(error).name)
            logger.debug("stream failure", exc_info=error)
        else:
            logger.warning("stream to the coordinator failed (%s); reconnecting", type(error).__name__)
            logger.debug("stream failure", exc_info=error)


async def _write(
    call: Any,
    outbox: asyncio.Queue[worker_service_pb2.ConnectRequest | None],
    welcome: worker_service_pb2.Welcome,
) -> None:
    """Writes everything queued, in order, until a None half-closes the stream; once
    ``welcome`` says the coordinator reads batches, in WorkerBatch messages."""
    left: list[worker_service_pb2.ConnectRequest | None] = []
    try:
        while True:
            message = left.pop(0) if left else await outbox.get()
            if message is None:
                break
            if welcome.batches and batchable(message):
                # One turn of the loop first: the runs ending in it join this message.
                await asyncio.sleep(0)
                message, left = take_batch(message, outbox)
            await call.write(message)
        await call.done_writing()
    except (grpc.RpcError, asyncio.InvalidStateError) as error:
        # The call is over; the reader sees why. Whatever matters is replayed on the next one.
        logger.debug("stream writer stopped (%s)", type(error).__name__)


async def _end_call(
    call: Any,
    writer: asyncio.Task[None],
    responses: AsyncIterator[worker_service_pb2.ConnectResponse],
) -> None:
    """Ends one stream in order: stop and await the writer, close the response
    generator unless it is running (then it ends with the call), cancel the call."""
    try:
        writer.cancel()
        await asyncio.wait({writer})
        if isinstance(responses, AsyncGeneratorType) and not responses.ag_running:
            await responses.aclose()
    finally:
        call.cancel()
    if not writer.cancelled() and (error := writer.exception()) is not None:
        logger.warning("stream writer failed (%s)", type(error).__name__)
        logger.debug("stream writer failure", exc_info=error)
