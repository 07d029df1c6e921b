"""The Worker and batched framing, against a scripted WorkerService on a real grpc.aio
server: it always asks for batches (Hello.batches), sends a WorkerBatch only to a
coordinator whose Welcome says it reads them, and handles every item of a
CoordinatorBatch as it would the same item on its own message."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker_sdk import JobContext, Worker, job
from worker_sdk.proto.runwick.v1 import job_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

if TYPE_CHECKING:
    from conftest import FakeCoordinator, FakeStream

MakeWorker = Callable[..., Worker]
WAIT_S = 3.0

BATCH_FIELDS = {"release": "releases", "start": "starts", "result": "results"}
"""The WorkerBatch field that carries each batchable ConnectRequest kind."""


@job("batches.resize")
@dataclass
class Resize:
    path: str


def assignment(stream: FakeStream, attempt_id: str) -> pb.Assignment:
    return stream.assignment(Resize(f"{attempt_id}.png"), attempt_id)


def assignments(stream: FakeStream, *attempt_ids: str) -> pb.CoordinatorBatch:
    """A CoordinatorBatch of these attempts' assignments."""
    return pb.CoordinatorBatch(assignments=[assignment(stream, a) for a in attempt_ids])


def granted(attempt_id: str) -> pb.StartAnswer:
    return pb.StartAnswer(attempt_id=attempt_id, granted=True, execution_number=1)


def accepted(attempt_id: str) -> pb.ResultAck:
    return pb.ResultAck(attempt_id=attempt_id, status=pb.ResultAck.STATUS_ACCEPTED)


async def opened(coordinator: FakeCoordinator, *, batches: bool) -> tuple[FakeStream, pb.Hello]:
    """Waits for the worker's stream and Hello, and welcomes it, saying ``batches``."""
    async with asyncio.timeout(WAIT_S):
        stream = await coordinator.streams.get()
    hello = await stream.next("hello")
    stream.send(welcome=pb.Welcome(coordinator_id="fake-coordinator", batches=batches))
    return stream, hello


async def batches_until(
    stream: FakeStream, counted: Callable[[pb.WorkerBatch], int], count: int
) -> list[pb.WorkerBatch]:
    """The WorkerBatch messages received until ``counted`` summed over them reaches
    ``count`` (other kinds of message are skipped)."""
    found: list[pb.WorkerBatch] = []
    async with asyncio.timeout(WAIT_S):
        while sum(map(counted, found)) < count:
            message = await stream.inbox.get()
            if message.WhichOneof("kind") == "batch":
                found.append(message.batch)
    return found


def credit_in(messages: list[pb.ConnectRequest]) -> int:
    """All the credit ``messages`` gave, on Credit messages and in WorkerBatch ones."""
    return sum(m.credit.count if m.WhichOneof("kind") == "credit" else m.batch.credit for m in messages)


async def items(stream: FakeStream, kind: str, count: int) -> list[Any]:
    """The next ``count`` items of ``kind`` (start, result, release; credit: counts),
    whether they came on messages of their own or inside WorkerBatch messages."""
    found: list[Any] = []
    async with asyncio.timeout(WAIT_S):
        while len(found) < count:
            message = await stream.inbox.get()
            sent = message.WhichOneof("kind")
            if sent == kind:
                found.append(message.credit.count if kind == "credit" else getattr(message, kind))
            elif sent == "batch" and kind == "credit":
                found += [message.batch.credit] if message.batch.credit else []
            elif sent == "batch":
                found += getattr(message.batch, BATCH_FIELDS[kind])
    return found


def ending_runs(finish: asyncio.Event) -> Callable[[Resize, JobContext], Any]:
    async def resize(job: Resize, ctx: JobContext) -> bytes:
        await finish.wait()
        return job.path.encode()

    return resize


async def test_against_a_coordinator_without_batches_the_worker_sends_single_messages(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    finish = asyncio.Event()
    worker = make_worker(concurrency=2)
    worker.handler(Resize)(ending_runs(finish))
    await worker.start()
    stream, hello = await opened(coordinator, batches=False)
    assert hello.batches, "the SDK reads CoordinatorBatch messages"
    assert (await stream.next("credit")).count == 2

    # Two assignments in a row, two starts at once, two runs ending together: what a
    # coordinator that reads batches would get in a few WorkerBatch messages.
    stream.send(assignment=assignment(stream, "att-1"))
    stream.send(assignment=assignment(stream, "att-2"))
    assert [(await stream.next("start")).attempt_id for _ in range(2)] == ["att-1", "att-2"]
    stream.grant("att-1")
    stream.grant("att-2")
    await stream.next("heartbeat")  # both runs are going
    finish.set()
    results = [await stream.next("result") for _ in range(2)]
    assert {(r.attempt_id, r.outcome, r.output) for r in results} == {
        ("att-1", job_pb2.OUTCOME_SUCCEEDED, b"att-1.png"),
        ("att-2", job_pb2.OUTCOME_SUCCEEDED, b"att-2.png"),
    }
    stream.ack("att-1")
    stream.ack("att-2")
    assert sum(await items(stream, "credit", 1)) >= 1

    await stream.round_trip(Resize("marker.png"))  # everything sent before it has arrived
    kinds = {m.WhichOneof("kind") for m in stream.received}
    assert "batch" not in kinds
    assert {"hello", "credit", "start", "result", "heartbeat"} <= kinds
    stream.refuse("att-marker")


async def test_against_a_coordinator_with_batches_the_worker_reads_and_sends_batches(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    finish = asyncio.Event()
    worker = make_worker(concurrency=2)
    worker.handler(Resize)(ending_runs(finish))
    await worker.start()
    stream, _ = await opened(coordinator, batches=True)
    assert await items(stream, "credit", 1) == [2]

    stream.send(batch=assignments(stream, "att-1", "att-2"))
    # Both starts were queued while handling one message: they go out together.
    both = await stream.next("batch")
    assert [s.attempt_id for s in both.starts] == ["att-1", "att-2"]
    assert not (both.results or both.releases or both.credit)

    stream.send(batch=pb.CoordinatorBatch(start_answers=[granted("att-1"), granted("att-2")]))
    await stream.next("heartbeat")
    finish.set()
    sent = await batches_until(stream, lambda batch: len(batch.results), 2)
    results = [result for batch in sent for result in batch.results]
    assert {(r.attempt_id, r.output) for r in results} == {("att-1", b"att-1.png"), ("att-2", b"att-2.png")}
    # A slot is free once its result is sent: the credit rides in the results' batch, so
    # the coordinator claims the next jobs in the results' own transaction.
    assert [batch.credit for batch in sent] == [len(batch.results) for batch in sent]

    stream.send(batch=pb.CoordinatorBatch(result_acks=[accepted("att-1"), accepted("att-2")]))
    stream.send(batch=assignments(stream, "att-marker"))
    assert await items(stream, "start", 1) == [pb.StartRequest(attempt_id="att-marker")]
    assert credit_in(stream.received) == 2 + 2, "the acks free nothing more"


async def test_every_item_of_a_coordinator_batch_is_handled_in_the_protocols_order(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    """An assignment, the start answer of another run and a cancel of a third in one
    message: the new claim is started, the granted run runs, the cancelled one ends."""
    cancelled = asyncio.Event()
    ran: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> None:
        ran.append(ctx.attempt_id)
        if ctx.attempt_id == "att-long":
            await ctx.wait_cancelled()
            cancelled.set()
            ctx.raise_if_cancelled()

    worker = make_worker(concurrency=3)
    worker.handler(Resize)(resize)
    await worker.start()
    stream, _ = await opened(coordinator, batches=True)
    stream.send(batch=assignments(stream, "att-long", "att-short"))
    assert [s.attempt_id for s in await items(stream, "start", 2)] == ["att-long", "att-short"]
    stream.send(batch=pb.CoordinatorBatch(start_answers=[granted("att-long")]))
    await stream.next("heartbeat")  # att-long is running

    stream.send(
        batch=pb.CoordinatorBatch(
            assignments=[assignment(stream, "att-new")],
            start_answers=[granted("att-short")],
            cancels=[pb.Cancel(attempt_id="att-long", reason="cancelled by request")],
        )
    )

    [new_start] = await items(stream, "start", 1)
    assert new_start.attempt_id == "att-new"
    results = {r.attempt_id: r for r in await items(stream, "result", 2)}
    assert results["att-short"].outcome == job_pb2.OUTCOME_SUCCEEDED
    assert (results["att-long"].outcome, results["att-long"].error_code) == (
        job_pb2.OUTCOME_CANCELLED,
        "cancelled",
    )
    assert cancelled.is_set() and sorted(ran) == ["att-long", "att-short"]
