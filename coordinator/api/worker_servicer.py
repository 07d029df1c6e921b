"""WorkerService.Connect: one bidirectional stream per worker process.

The first message must be Hello; after Welcome, a reader task hands every message to
the dispatcher while this generator writes the session's outbox to the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from coordinator.api import protocol
from coordinator.api.convert import duration_ms
from coordinator.dispatch import Dispatcher, WorkerSession
from coordinator.errors import InvalidArgument
from coordinator.service import DEFAULT_QUEUE
from coordinator.validation import check_name
from coordinator.worker_ops import ResultAnswer
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_LEASE_MS = 60_000
LEASE_RANGE_MS = (100, 24 * 3_600_000)
MAX_CAPACITY = 10_000


class WorkerServicer(worker_service_pb2_grpc.WorkerServiceServicer):
    def __init__(self, dispatcher: Dispatcher, coordinator_id: str, hello_timeout_s: float) -> None:
        self.dispatcher = dispatcher
        self.coordinator_id = coordinator_id
        self.hello_timeout_s = hello_timeout_s

    async def Connect(
        self, request_iterator: AsyncIterator[pb.WorkerMessage], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.CoordinatorMessage]:
        if self.dispatcher.draining:
            # Shutting down: send the worker to another replica (or to our successor).
            await context.abort(grpc.StatusCode.UNAVAILABLE, "coordinator is shutting down")
        try:
            first = await asyncio.wait_for(anext(request_iterator, None), self.hello_timeout_s)
        except TimeoutError:
            first = None  # a stream that never says hello must not hold a slot forever
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, "the first message on the stream must be hello"
            )
        try:
            session = _session(first.hello)
        except InvalidArgument as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        self.dispatcher.open(session)
        log.info(
            "worker %s connected (queues %s, capacity %d)",
            session.worker_id,
            session.queues,
            session.capacity,
        )
        reader = asyncio.create_task(self._read(session, request_iterator))
        try:
            yield protocol.welcome(self.coordinator_id)
            while True:
                message = await session.outbox.get()
                if message is None:
                    break
                yield message  # type: ignore[misc]
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self.dispatcher.close(session)
            log.info("worker %s disconnected", session.worker_id)

    async def _read(self, session: WorkerSession, messages: AsyncIterator[pb.WorkerMessage]) -> None:
        try:
            async for message in messages:
                self._handle(session, message)
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("worker %s: stream reader failed", session.worker_id)
        finally:
            session.close()

    def _handle(self, session: WorkerSession, message: pb.WorkerMessage) -> None:
        kind = message.WhichOneof("kind")
        dispatcher = self.dispatcher
        if kind == "credit":
            dispatcher.add_credit(session, message.credit.count)
        elif kind == "start":
            dispatcher.start(session, message.start.attempt_id)
        elif kind == "heartbeat":
            lease_ms = session.lease_ms
            if message.heartbeat.HasField("lease"):
                try:
                    lease_ms = _lease_ms(message.heartbeat.lease, "heartbeat.lease")
                except InvalidArgument as exc:
                    log.warning("worker %s: %s; using its hello lease", session.worker_id, exc)
            dispatcher.heartbeat(session, list(message.heartbeat.attempt_ids), lease_ms)
        elif kind == "result":
            try:
                dispatcher.result(session, protocol.result_report(message.result))
            except InvalidArgument as exc:
                log.warning("worker %s: rejected result: %s", session.worker_id, exc)
                session.send(
                    protocol.result_ack(ResultAnswer(message.result.attempt_id, False, reason=str(exc)))
                )
        elif kind == "release":
            dispatcher.release(session, message.release.attempt_id)
        else:
            log.warning("worker %s sent an unexpected %s message; ignored", session.worker_id, kind)


def _lease_ms(value: Any, field: str) -> int:
    lease = duration_ms(value, field)
    low, high = LEASE_RANGE_MS
    if not low <= lease <= high:
        raise InvalidArgument(field, f"must be {low} ms to 24 h, got {lease} ms")
    return lease


def _session(hello: pb.Hello) -> WorkerSession:
    if not hello.worker_id or len(hello.worker_id) > 256:
        raise InvalidArgument("hello.worker_id", "must be 1 to 256 characters")
    queues = tuple(dict.fromkeys(hello.queues)) or (DEFAULT_QUEUE,)
    for queue in queues:
        check_name("hello.queues", queue)
    wire_names = tuple(dict.fromkeys(hello.wire_names))
    for name in wire_names:
        check_name("hello.wire_names", name)
    if not 1 <= hello.capacity <= MAX_CAPACITY:
        raise InvalidArgument("hello.capacity", f"must be 1 to {MAX_CAPACITY}, got {hello.capacity}")
    lease_ms = _lease_ms(hello.lease, "hello.lease") if hello.HasField("lease") else DEFAULT_LEASE_MS
    return WorkerSession(hello.worker_id, queues, wire_names, hello.capacity, lease_ms)
