"""WorkerService.Connect: one bidirectional stream per worker process.

The first message must be Hello; after Welcome, a reader task hands every message to
the dispatcher while this generator writes the session's outbox to the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import grpc

from coordinator.api import protocol
from coordinator.api.auth import current_principal
from coordinator.api.convert import duration_ms
from coordinator.api.progress import heartbeat_progress
from coordinator.app import Coordinator, WorkerSession
from coordinator.dispatch.deliveries import Delivery, WorkerHello
from coordinator.domain.bounds import STREAM_BOUNDS
from coordinator.domain.records import DEFAULT_QUEUE
from coordinator.domain.settings import DEFAULT_LEASE_MS, LEASE_RANGE_MS, describe_ms
from coordinator.errors import CoordinatorError, FailedPrecondition, InvalidArgument
from coordinator.service.work import HeartbeatAnswer, ResultAnswer, StartAnswer
from coordinator.validation import check_name, check_worker_id
from worker_sdk.grammar import MAX_NAME_UTF16_UNITS
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

log = logging.getLogger(__name__)

MAX_CAPACITY = STREAM_BOUNDS.max_capacity
_ANSWERS = (StartAnswer, ResultAnswer, HeartbeatAnswer)
"""What answers an item the worker sent: it stops counting in the stream's budget once sent."""


class WorkerServicer(worker_service_pb2_grpc.WorkerServiceServicer):
    def __init__(
        self,
        app: Coordinator,
        coordinator_id: str,
        hello_timeout_s: float,
        max_stream_age_s: float | None = None,
    ) -> None:
        self.app = app
        self.coordinator_id = coordinator_id
        self.hello_timeout_s = hello_timeout_s
        self.max_stream_age_s = max_stream_age_s
        """Streams are ended cleanly after about this long (docs/scaling.md), before the
        transport's maximum connection age would cut them."""

    async def Connect(
        self, request_iterator: AsyncIterator[pb.ConnectRequest], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ConnectResponse]:
        # Errors raised here end the stream with their status (api.errors.ErrorInterceptor).
        self.app.check_accepting_workers()  # before waiting for Hello
        try:
            first = await asyncio.wait_for(anext(request_iterator, None), self.hello_timeout_s)
        except TimeoutError:
            first = None  # a stream that never says hello must not hold a slot forever
        if first is None or first.WhichOneof("kind") != "hello":
            raise FailedPrecondition(
                "the first message on the stream must be hello (send Hello, then wait for Welcome)",
                reason="HELLO_REQUIRED",
            )
        hello = _hello(first.hello, self.app.bounds.max_wire_name_length)
        principal = current_principal()
        if not principal.may_work(hello.queues):
            allowed = ", ".join(sorted(principal.queues or ()))
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"token {principal.name!r} ({principal.token_id}) may take jobs from queues "
                f"[{allowed}] only, not [{', '.join(hello.queues)}]",
            )
        session = self.app.connect_worker(
            dataclasses.replace(hello, token_id=principal.token_id, token_queues=principal.queues)
        )
        log.info(
            "worker %s connected (queues %s, capacity %d)",
            session.worker_id,
            session.queues,
            session.capacity,
        )
        reader = asyncio.create_task(self._read(session, request_iterator))
        retire: asyncio.TimerHandle | None = None
        if self.max_stream_age_s is not None:
            # A clean end (no assignment lost in a cut); the worker reconnects, perhaps to
            # another replica. Jitter keeps a fleet from reconnecting all at once.
            age_s = self.max_stream_age_s * random.uniform(0.9, 1.0)
            retire = asyncio.get_running_loop().call_later(age_s, session.retire)
        try:
            yield protocol.welcome(self.coordinator_id)
            batches = first.hello.batches
            while True:
                delivery = await session.outbox.get()
                if delivery is None:
                    break
                if not batches:
                    for message in protocol.frame(delivery):
                        yield message
                    if isinstance(delivery, _ANSWERS):
                        session.give_back(1)
                    continue
                # Everything ready for the stream goes out together: one message per
                # write instead of one per item (the per-message cost dominates here).
                deliveries, ended = _ready(session.outbox, delivery)
                for message in protocol.frame_batched(deliveries):
                    yield message
                # Sent (gRPC took them): the reader may take as many items again.
                session.give_back(sum(isinstance(d, _ANSWERS) for d in deliveries))
                if ended:
                    break
            # A protocol violation ends the reader, and the stream with its status.
            violation = reader.result() if reader.done() and not reader.cancelled() else None
            if violation is not None:
                raise violation
        finally:
            if retire is not None:
                retire.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self.app.disconnect_worker(session)
            log.info("worker %s disconnected", session.worker_id)

    async def _read(
        self, session: WorkerSession, messages: AsyncIterator[pb.ConnectRequest]
    ) -> CoordinatorError | None:
        """Hands every message to the dispatcher; returns the protocol violation that
        ended the stream, if one did. While the stream's budget, or the batch waiting for
        the writer, is full it reads nothing: gRPC flow control then stops the client."""
        batch_full = self.app.dispatcher.batch_full
        try:
            async for message in messages:
                self._handle(session, message)
                if session.full or batch_full():
                    await session.wait_for_room(batch_full)
        except CoordinatorError as exc:
            log.warning(
                "worker %s: stream ended for a protocol violation (%s)", session.worker_id, exc.reason
            )
            return exc
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("worker %s: stream reader failed", session.worker_id)
        finally:
            session.close()
        return None

    def _handle(self, session: WorkerSession, message: pb.ConnectRequest) -> None:
        """One worker message. A message out of order or malformed for the stream as a
        whole raises (the stream ends with FAILED_PRECONDITION or INVALID_ARGUMENT); one
        about an attempt this coordinator does not know is answered per message instead
        (start refused, result rejected, heartbeat: lost), since a reconnecting worker
        rightly names attempts it was assigned on an earlier stream."""
        kind = message.WhichOneof("kind")
        if kind == "credit":
            session.add_credit(_credit(message.credit.count, "credit.count"))  # clamped to the capacity
        elif kind == "batch":
            self._handle_batch(session, message.batch)
        elif kind == "start":
            session.start(message.start.attempt_id)
        elif kind == "heartbeat":
            count, limit = len(message.heartbeat.attempt_ids), STREAM_BOUNDS.max_heartbeat_attempts
            if count > limit:
                message_text = f"{count} attempts, over the limit of {limit}"
                raise InvalidArgument("heartbeat.attempt_ids", message_text, reason="OUT_OF_RANGE")
            attempt_ids = message.heartbeat.attempt_ids  # copied only if written (not merged away)
            lease_ms = session.lease_ms
            if message.heartbeat.HasField("lease"):
                lease_ms = _lease_ms(message.heartbeat.lease, "heartbeat.lease")
            session.heartbeat(attempt_ids, lease_ms, heartbeat_progress(message.heartbeat))
            session.last_heartbeat_ms = self.app.clock.now_ms()  # the dashboard's workers page
        elif kind == "result":
            _result(session, message.result)
        elif kind == "release":
            session.release(message.release.attempt_id)
        elif kind == "hello":
            raise FailedPrecondition(
                "hello may be sent only once, as the stream's first message", reason="STREAM_OUT_OF_ORDER"
            )
        else:
            raise InvalidArgument(
                "kind",
                "the message sets none of credit, start, heartbeat, result, release, batch "
                "(empty, or a kind this coordinator does not know)",
                reason="UNKNOWN_MESSAGE",
            )

    def _handle_batch(self, session: WorkerSession, batch: pb.WorkerBatch) -> None:
        """A WorkerBatch: its items as if each had come on its own, in the order
        releases, starts, results, credit. What would end the stream on its own message
        is checked first, so a batch that ends the stream hands nothing on."""
        for field, items in (
            ("batch.releases", batch.releases),
            ("batch.starts", batch.starts),
            ("batch.results", batch.results),
        ):
            if len(items) > MAX_CAPACITY:
                raise InvalidArgument(
                    field, f"{len(items)} items, over the limit of {MAX_CAPACITY}", reason="OUT_OF_RANGE"
                )
        credit = _credit(batch.credit, "batch.credit")
        for release in batch.releases:
            session.release(release.attempt_id)
        for start in batch.starts:
            session.start(start.attempt_id)
        for result in batch.results:
            _result(session, result)
        if credit:
            session.add_credit(credit)


def _ready(outbox: asyncio.Queue[Delivery | None], first: Delivery) -> tuple[list[Delivery], bool]:
    """``first`` and every delivery already waiting behind it; True when the stream's
    end (a None) was among them."""
    deliveries = [first]
    while not outbox.empty():
        delivery = outbox.get_nowait()
        if delivery is None:
            return deliveries, True
        deliveries.append(delivery)
    return deliveries, False


def _credit(count: int, field: str) -> int:
    if count < 0:
        raise InvalidArgument(field, f"must be 0 or more, got {count}", reason="OUT_OF_RANGE")
    return count


def _result(session: WorkerSession, result: pb.Result) -> None:
    """Hands a result on, or answers it REJECTED when it is malformed (the stream goes on)."""
    try:
        session.result(protocol.result_report(result))
    except InvalidArgument as exc:
        log.warning("worker %s: rejected a result (%s)", session.worker_id, exc.reason)
        session.reject_result(ResultAnswer(result.attempt_id, False, reason=str(exc), error=exc))


def _lease_ms(value: Any, field: str) -> int:
    lease = duration_ms(value, field)
    low, high = LEASE_RANGE_MS
    if not low <= lease <= high:
        raise InvalidArgument(
            field,
            f"must be {describe_ms(low)} to {describe_ms(high)}, got {lease} ms",
            reason="INVALID_DURATION",
        )
    return lease


def _hello(hello: pb.Hello, max_name_length: int) -> WorkerHello:
    check_worker_id("hello.worker_id", hello.worker_id)
    bounds = STREAM_BOUNDS
    checked: list[tuple[str, ...]] = []
    for field, names, most, longest in (
        ("hello.queues", hello.queues, bounds.max_hello_queues, MAX_NAME_UTF16_UNITS),
        ("hello.wire_names", hello.wire_names, bounds.max_hello_wire_names, max_name_length),
    ):
        # Counted as sent, before any name is looked at: a claim reads every queue,
        # binding every wire name, so these bound what one stream makes a claim cost.
        if len(names) > most:
            too_many = f"{len(names)} names, over the limit of {most}"
            raise InvalidArgument(field, too_many, reason="OUT_OF_RANGE")
        unique = tuple(dict.fromkeys(names))
        for name in unique:
            check_name(field, name, max_length=longest)
        checked.append(unique)
    queues, wire_names = checked[0] or (DEFAULT_QUEUE,), checked[1]
    if not 1 <= hello.capacity <= MAX_CAPACITY:
        raise InvalidArgument(
            "hello.capacity", f"must be 1 to {MAX_CAPACITY}, got {hello.capacity}", reason="OUT_OF_RANGE"
        )
    lease_ms = _lease_ms(hello.lease, "hello.lease") if hello.HasField("lease") else DEFAULT_LEASE_MS
    host = _said("hello.host", hello.host, MAX_HOST_CHARS)
    sdk = _said("hello.sdk", hello.sdk, MAX_SDK_CHARS)
    return WorkerHello(hello.worker_id, queues, wire_names, hello.capacity, lease_ms, host=host, sdk=sdk)


MAX_HOST_CHARS = 256
MAX_SDK_CHARS = 128


def _said(field: str, value: str, limit: int) -> str:
    """An optional Hello text: at most ``limit`` printable characters."""
    if len(value) > limit:
        raise InvalidArgument(
            field, f"must be at most {limit} characters, got {len(value)}", reason="OUT_OF_RANGE"
        )
    if not value.isprintable():
        raise InvalidArgument(field, "holds control characters; use printable text", reason="OUT_OF_RANGE")
    return value
