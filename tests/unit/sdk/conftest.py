"""Test doubles for the worker SDK: a scriptable WorkerService and a fake JobService.

``FakeCoordinator`` runs on a real grpc.aio server on 127.0.0.1 port 0; each test drives
the coordinator's side of a stream by hand (welcome, assign, answer, ack, drop), so the
protocol is pinned message by message. ``FakeJobService`` is a plain (threaded) grpc
server so the blocking ``Client`` can call it without deadlocking the test's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc
import grpc.aio
import pytest

from worker_sdk import Worker
from worker_sdk._jobs import encode_payload
from worker_sdk.proto.runwick.v1 import (
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2,
    worker_service_pb2_grpc,
)

_END = worker_service_pb2.ConnectResponse()
"""Queued by the fake when the worker half-closed: end the stream normally."""

WAIT_S = 3.0
"""Upper bound for any single expected message; tests normally see it in milliseconds."""


class FakeStream:
    """The coordinator's end of one Connect stream."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = dict(metadata)
        self.inbox: asyncio.Queue[worker_service_pb2.ConnectRequest] = asyncio.Queue()
        self.outbox: asyncio.Queue[worker_service_pb2.ConnectResponse | None] = asyncio.Queue()
        self.received: list[worker_service_pb2.ConnectRequest] = []
        self.closed = asyncio.Event()

    def send(self, **kind: Any) -> None:
        """Sends one ConnectResponse, e.g. ``send(welcome=Welcome(...))``."""
        self.outbox.put_nowait(worker_service_pb2.ConnectResponse(**kind))

    def drop(self) -> None:
        """Ends the stream from the coordinator's side (status UNAVAILABLE)."""
        self.outbox.put_nowait(None)

    def end(self) -> None:
        """Ends the stream from the coordinator's side with status OK, as a coordinator
        rotating an old connection does, without waiting for the worker's half-close."""
        self.outbox.put_nowait(_END)

    async def next(self, kind: str, timeout_s: float = WAIT_S) -> Any:
        """The next message of ``kind`` (skipping others), as its oneof payload."""
        async with asyncio.timeout(timeout_s):
            while True:
                message = await self.inbox.get()
                if message.WhichOneof("kind") == kind:
                    return getattr(message, kind)

    async def next_where(self, kind: str, matches: Callable[[Any], bool], timeout_s: float = WAIT_S) -> Any:
        """The next message of ``kind`` that ``matches`` (skipping others)."""
        async with asyncio.timeout(timeout_s):
            while not matches(message := await self.next(kind, timeout_s)):
                pass
        return message

    async def round_trip(self, payload: object, attempt_id: str = "att-marker") -> None:
        """Assigns a marker claim and waits for the worker's StartRequest for it.

        The worker handles coordinator messages one at a time, answers an assignment
        at once, and sends on one ordered stream: once this returns, everything it sent
        before it handled the marker has arrived. Check an absence after this, not after
        a sleep. The marker stays reserved (a slot, named in heartbeats) until the test
        ``refuse``s it.
        """
        self.assign(payload, attempt_id)
        await self.next_where("start", lambda start: start.attempt_id == attempt_id)

    def kinds(self, kind: str) -> list[Any]:
        """Every message of ``kind`` received so far, oldest first."""
        return [getattr(m, kind) for m in self.received if m.WhichOneof("kind") == kind]

    # Conveniences for the coordinator's side of the protocol.

    def welcome(self) -> None:
        self.send(welcome=worker_service_pb2.Welcome(coordinator_id="fake-coordinator"))

    def assign(self, payload: object, attempt_id: str, **fields: Any) -> None:
        self.send(assignment=self.assignment(payload, attempt_id, **fields))

    @staticmethod
    def assignment(payload: object, attempt_id: str, **fields: Any) -> worker_service_pb2.Assignment:
        """The Assignment of ``payload``'s job under ``attempt_id`` (its first execution)."""
        spec, data = encode_payload(payload)
        return worker_service_pb2.Assignment(
            job_id=f"job-{attempt_id}",
            attempt_id=attempt_id,
            wire_name=spec.wire_name,
            queue=spec.queue,
            payload=data,
            payload_version=spec.version,
            execution_number=1,
            max_executions=3,
            generation=1,
            **fields,
        )

    def grant(self, attempt_id: str, execution_number: int = 1) -> None:
        self.send(
            start_answer=worker_service_pb2.StartAnswer(
                attempt_id=attempt_id, granted=True, execution_number=execution_number
            )
        )

    def refuse(self, attempt_id: str, reason: str = "no longer reserved") -> None:
        self.send(start_answer=worker_service_pb2.StartAnswer(attempt_id=attempt_id, reason=reason))

    def ack(self, attempt_id: str, stale: bool = False) -> None:
        status = (
            worker_service_pb2.ResultAck.STATUS_STALE
            if stale
            else worker_service_pb2.ResultAck.STATUS_ACCEPTED
        )
        self.send(result_ack=worker_service_pb2.ResultAck(attempt_id=attempt_id, status=status))


class FakeCoordinator(worker_service_pb2_grpc.WorkerServiceServicer):
    """A WorkerService whose streams the test drives; answers heartbeats by itself.

    ``lost`` holds attempt IDs the heartbeat answers report as lost; with
    ``answer_heartbeats`` False the fake plays a coordinator that stopped answering.
    """

    def __init__(self) -> None:
        self.target = ""
        self.streams: asyncio.Queue[FakeStream] = asyncio.Queue()
        self.lost: set[str] = set()
        self.answer_heartbeats = True

    async def Connect(
        self,
        request_iterator: AsyncIterator[worker_service_pb2.ConnectRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[worker_service_pb2.ConnectResponse]:
        stream = FakeStream(tuple(context.invocation_metadata() or ()))
        self.streams.put_nowait(stream)
        pump = asyncio.create_task(self._pump(request_iterator, stream))
        try:
            while True:
                message = await stream.outbox.get()
                if message is _END:
                    return
                if message is None:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "dropped by the test")
                yield message
        finally:
            pump.cancel()
            stream.closed.set()

    async def _pump(
        self, requests: AsyncIterator[worker_service_pb2.ConnectRequest], stream: FakeStream
    ) -> None:
        async for message in requests:
            stream.received.append(message)
            stream.inbox.put_nowait(message)
            if message.WhichOneof("kind") == "heartbeat" and self.answer_heartbeats:
                lost = [a for a in message.heartbeat.attempt_ids if a in self.lost]
                stream.send(heartbeat_answer=worker_service_pb2.HeartbeatAnswer(lost_attempt_ids=lost))
        # The worker half-closed: end the stream as a coordinator does.
        stream.outbox.put_nowait(_END)

    async def accept(self) -> tuple[FakeStream, worker_service_pb2.Hello]:
        """Waits for the next stream and its Hello, and welcomes it."""
        async with asyncio.timeout(WAIT_S):
            stream = await self.streams.get()
        hello = await stream.next("hello")
        stream.welcome()
        return stream, hello


@pytest.fixture
async def coordinator() -> AsyncIterator[FakeCoordinator]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    fake = FakeCoordinator()
    worker_service_pb2_grpc.add_WorkerServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    fake.target = f"127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await server.stop(0.1)


FAST = {
    "heartbeat_interval": timedelta(milliseconds=100),
    "drain_timeout": timedelta(milliseconds=150),
    "cancellation_grace": timedelta(milliseconds=100),
    "reconnect_initial_delay": timedelta(milliseconds=10),
    "reconnect_max_delay": timedelta(milliseconds=50),
    "hello_timeout": timedelta(seconds=2),
    "ack_timeout": timedelta(milliseconds=200),
}
"""Worker timings that keep protocol tests in the millisecond range."""


@pytest.fixture
async def make_worker(coordinator: FakeCoordinator) -> AsyncIterator[Callable[..., Worker]]:
    """Builds workers against the fake coordinator (fast timings); stops them at the end."""
    workers: list[Worker] = []

    def build(**options: Any) -> Worker:
        worker = Worker(coordinator.target, **{"worker_id": "w-test", "concurrency": 2, **FAST, **options})
        workers.append(worker)
        return worker

    yield build
    for worker in workers:
        await worker.stop()


@dataclass
class FakeJobService(job_service_pb2_grpc.JobServiceServicer):
    """A JobService that records requests and answers from canned data."""

    jobs: dict[str, job_pb2.Job] = field(default_factory=dict)
    attempts: list[job_pb2.Attempt] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)
    fail_with: tuple[grpc.StatusCode, str] | None = None
    page_size: int = 2
    waits_before_terminal: int = 0

    def _record(self, request: Any, context: grpc.ServicerContext) -> None:
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if self.fail_with is not None:
            context.abort(*self.fail_with)

    def Enqueue(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        return job_service_pb2.EnqueueResponse(
            jobs=[job_service_pb2.EnqueuedJob(id=f"job-{i}") for i in range(len(request.jobs))]
        )

    def GetJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        if request.id not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.id} not found")
        return job_service_pb2.GetJobResponse(job=self.jobs[request.id])

    def WaitJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        job = self.jobs[request.id]
        if self.waits_before_terminal > 0:
            self.waits_before_terminal -= 1
            running = job_pb2.Job()
            running.CopyFrom(job)
            running.state = job_pb2.JOB_STATE_RUNNING
            return job_service_pb2.WaitJobResponse(job=running, terminal=False)
        return job_service_pb2.WaitJobResponse(job=job, terminal=True)

    def ListJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        ordered = sorted(self.jobs.values(), key=lambda j: j.id)
        start = int(request.page_token or 0)
        page = ordered[start : start + self.page_size]
        following = start + self.page_size
        token = str(following) if following < len(ordered) else ""
        return job_service_pb2.ListJobsResponse(jobs=page, next_page_token=token)

    def ListAttempts(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        return job_service_pb2.ListAttemptsResponse(attempts=self.attempts)


@pytest.fixture
def job_service() -> Iterator[tuple[FakeJobService, str]]:
    """A threaded fake JobService; yields it and its target."""
    fake = FakeJobService()
    server = grpc.server(ThreadPoolExecutor(4), options=[("grpc.so_reuseport", 0)])
    job_service_pb2_grpc.add_JobServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake, f"127.0.0.1:{port}"
    finally:
        server.stop(0.1).wait()
