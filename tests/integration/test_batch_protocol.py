"""Batched framing on the worker stream, against the real coordinator on each engine.

A worker whose Hello sets ``batches`` gets its assignments, start answers, result acks
and cancels in CoordinatorBatch messages; one that does not gets one message per item.
Any worker may send a WorkerBatch (the Welcome says the coordinator reads them): each
item is answered as it would be on its own message, fencing holds per item, and only
what would end the stream on its own message (negative credit, more than 10,000 items
of one kind) ends it, before any item of the batch is handed on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from tests.support import eventually
from worker_sdk import ArgumentError, AsyncClient, JobState
from worker_sdk._errors import translate_rpc_error
from worker_sdk.proto.runwick.v1 import job_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

WIRE = "tests.echo"
MAX_ITEMS = 10_000
"""Items of one kind a WorkerBatch may carry (worker_service.proto)."""


@pytest.fixture
async def workers(coordinator: Coordinator) -> AsyncIterator[list[RawWorker]]:
    """Raw workers a test opens (``workers.append``); all closed at the end."""
    opened: list[RawWorker] = []
    yield opened
    for worker in opened:
        await worker.close()


def open_worker(
    coordinator: Coordinator,
    workers: list[RawWorker],
    worker_id: str,
    *,
    capacity: int = 4,
    batches: bool = True,
) -> RawWorker:
    worker = RawWorker(coordinator.target, worker_id, [WIRE], capacity=capacity, batches=batches)
    workers.append(worker)
    return worker


async def welcomed(worker: RawWorker) -> pb.Welcome:
    welcome = await worker.next("welcome")
    assert isinstance(welcome, pb.Welcome)
    return welcome


async def claimed(worker: RawWorker, count: int) -> list[pb.Assignment]:
    """Sends credit for ``count`` (a plain Credit: singles stay valid on a batch
    stream) and returns the assignments, from however many batches they come in."""
    worker.send(credit=pb.Credit(count=count))
    return await worker.batch_items("assignments", count)


async def running(worker: RawWorker, count: int) -> list[pb.Assignment]:
    """Claims ``count`` jobs and starts them all in one batch."""
    assignments = await claimed(worker, count)
    worker.send_batch(starts=[pb.StartRequest(attempt_id=a.attempt_id) for a in assignments])
    answers = await worker.batch_items("start_answers", count)
    assert all(answer.granted for answer in answers), answers
    return assignments


def succeeded(attempt_id: str, output: bytes = b"") -> pb.Result:
    return pb.Result(attempt_id=attempt_id, outcome=job_pb2.OUTCOME_SUCCEEDED, output=output)


def by_attempt(items: list[pb.StartAnswer] | list[pb.ResultAck]) -> dict[str, pb.StartAnswer | pb.ResultAck]:
    return {item.attempt_id: item for item in items}


async def stream_error(worker: RawWorker) -> ArgumentError:
    """Reads until the stream ends; it must end with a status, not OK."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        while True:
            await worker.read()
    error = translate_rpc_error(caught.value)
    assert isinstance(error, ArgumentError), error
    return error


async def dispatcher_caught_up(coordinator: Coordinator, workers: list[RawWorker]) -> None:
    """Waits for a start of another stream to be answered: the dispatcher carries out
    what it was handed in order, so anything handed on before is written by then."""
    bystander = open_worker(coordinator, workers, f"bystander-{uuid.uuid4().hex[:8]}", batches=False)
    await welcomed(bystander)
    bystander.send(start=pb.StartRequest(attempt_id=str(uuid.uuid4())))
    answer = await bystander.next("start_answer")
    assert isinstance(answer, pb.StartAnswer) and not answer.granted


# -- negotiation and framing --------------------------------------------------------------


async def test_a_batch_worker_gets_assignments_answers_and_acks_in_batches(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    job_ids = await client.enqueue_many([Echo(f"job {n}") for n in range(3)])
    worker = open_worker(coordinator, workers, "batch-worker")
    assert (await welcomed(worker)).batches

    worker.send(credit=pb.Credit(count=3))
    # One claim took all three jobs, so they ride in one message.
    batch = await worker.next_batch()
    assert sorted(a.job_id for a in batch.assignments) == sorted(job_ids)
    assert not (batch.start_answers or batch.result_acks or batch.cancels)
    attempts = [a.attempt_id for a in batch.assignments]

    worker.send_batch(starts=[pb.StartRequest(attempt_id=a) for a in attempts])
    batch = await worker.next_batch()
    assert [(s.attempt_id, s.granted, s.execution_number) for s in batch.start_answers] == [
        (a, True, 1) for a in attempts
    ]

    worker.send_batch(results=[succeeded(a, output=a.encode()) for a in attempts])
    batch = await worker.next_batch()
    assert [(ack.attempt_id, ack.status, ack.job_state) for ack in batch.result_acks] == [
        (a, pb.ResultAck.STATUS_ACCEPTED, job_pb2.JOB_STATE_SUCCEEDED) for a in attempts
    ]

    assert set(worker.kinds()) == {"welcome", "batch"}, "no item came on a message of its own"
    for assignment in batch_assignments(worker):
        info = await client.get(assignment.job_id)
        assert (info.state, info.output, info.executions) == (
            JobState.SUCCEEDED,
            assignment.attempt_id.encode(),
            1,
        )


def batch_assignments(worker: RawWorker) -> list[pb.Assignment]:
    """Every assignment the worker has read, in batches, so far."""
    return [a for m in worker.received if m.WhichOneof("kind") == "batch" for a in m.batch.assignments]


async def test_a_worker_without_batches_gets_one_message_per_item(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    job_ids = await client.enqueue_many([Echo("one"), Echo("two")])
    worker = open_worker(coordinator, workers, "single-worker", batches=False)
    assert (await welcomed(worker)).batches, "the coordinator reads batches whatever the worker reads"

    worker.send(credit=pb.Credit(count=2))
    assignments = [await worker.next("assignment") for _ in job_ids]
    assert sorted(a.job_id for a in assignments) == sorted(job_ids)  # type: ignore[attr-defined]
    attempts = [a.attempt_id for a in assignments]  # type: ignore[attr-defined]

    # It may still send a batch; the answers come one message each.
    worker.send_batch(starts=[pb.StartRequest(attempt_id=a) for a in attempts])
    answers = [await worker.next("start_answer") for _ in attempts]
    assert [(s.attempt_id, s.granted) for s in answers] == [(a, True) for a in attempts]  # type: ignore[attr-defined]
    for attempt_id in attempts:
        ack = await worker.succeed(attempt_id, b"done")
        assert ack.status == pb.ResultAck.STATUS_ACCEPTED

    assert "batch" not in worker.kinds()
    assert worker.kinds().count("assignment") == 2 and worker.kinds().count("start_answer") == 2
    for job_id in job_ids:
        assert (await client.get(job_id)).state is JobState.SUCCEEDED


async def test_a_cancel_comes_in_a_batch(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    job_id = await client.enqueue(Echo("to cancel"))
    worker = open_worker(coordinator, workers, "cancelled-worker")
    await welcomed(worker)
    [assignment] = await running(worker, 1)

    await client.cancel(job_id)
    [cancel] = await worker.batch_items("cancels", 1)
    assert (cancel.attempt_id, cancel.reason) == (assignment.attempt_id, "cancelled by request")

    worker.send_batch(
        results=[pb.Result(attempt_id=assignment.attempt_id, outcome=job_pb2.OUTCOME_CANCELLED)]
    )
    [ack] = await worker.batch_items("result_acks", 1)
    assert (ack.status, ack.job_state) == (pb.ResultAck.STATUS_ACCEPTED, job_pb2.JOB_STATE_CANCELLED)
    assert (await client.get(job_id)).state is JobState.CANCELLED


async def test_credit_carried_in_a_batch_leads_to_assignments(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    first_ids = await client.enqueue_many([Echo("a"), Echo("b")])
    worker = open_worker(coordinator, workers, "credit-worker", capacity=2)
    await welcomed(worker)

    worker.send_batch(credit=2)
    assignments = await worker.batch_items("assignments", 2)
    assert sorted(a.job_id for a in assignments) == sorted(first_ids)
    worker.send_batch(starts=[pb.StartRequest(attempt_id=a.attempt_id) for a in assignments])
    assert all(s.granted for s in await worker.batch_items("start_answers", 2))

    # The results free both slots and the credit in the same batch refills one.
    next_id = await client.enqueue(Echo("c"))
    worker.send_batch(results=[succeeded(a.attempt_id) for a in assignments], credit=1)
    acks = await worker.batch_items("result_acks", 2)
    assert all(ack.status == pb.ResultAck.STATUS_ACCEPTED for ack in acks)
    [refill] = await worker.batch_items("assignments", 1)
    assert refill.job_id == next_id


# -- each item answered on its own --------------------------------------------------------


async def test_a_batch_answers_each_start_on_its_own(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    job_id = await client.enqueue(Echo("good"))
    worker = open_worker(coordinator, workers, "partial-starts")
    await welcomed(worker)
    [assignment] = await claimed(worker, 1)
    unknown, not_an_id, good = str(uuid.uuid4()), "not-an-attempt", assignment.attempt_id

    # The good start twice: a repeat gets the first answer, in the same batch too.
    worker.send_batch(starts=[pb.StartRequest(attempt_id=a) for a in (unknown, good, good, not_an_id)])
    answers = await worker.batch_items("start_answers", 4)

    assert [(a.attempt_id, a.granted, a.execution_number, a.reason) for a in answers] == [
        (unknown, False, 0, "unknown attempt"),
        (good, True, 1, ""),
        (good, True, 1, ""),
        (not_an_id, False, 0, "unknown attempt"),
    ]
    info = await client.get(job_id)
    assert (info.state, info.executions) == (JobState.RUNNING, 1)


async def test_a_batch_answers_each_result_on_its_own(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    await client.enqueue_many([Echo(f"job {n}") for n in range(4)])
    worker = open_worker(coordinator, workers, "partial-results")
    await welcomed(worker)
    assignments = await running(worker, 4)
    good, not_reportable, bad_delay, negative_delay = (a.attempt_id for a in assignments)
    jobs = {a.attempt_id: a.job_id for a in assignments}

    worker.send_batch(
        results=[
            succeeded(good, b"kept"),
            # The coordinator's outcome to record, not a worker's to report.
            pb.Result(attempt_id=not_reportable, outcome=job_pb2.OUTCOME_ABANDONED),
            # Seconds and nanos of opposite signs: not a Duration at all.
            pb.Result(
                attempt_id=bad_delay,
                outcome=job_pb2.OUTCOME_RETRYABLE_FAILURE,
                retry_delay=Duration(seconds=1, nanos=-1_000_000),
            ),
            # A valid negative delay is no malformed result: it fails the job.
            pb.Result(
                attempt_id=negative_delay,
                outcome=job_pb2.OUTCOME_RETRYABLE_FAILURE,
                retry_delay=Duration(seconds=-1),
            ),
        ]
    )
    acks = by_attempt(await worker.batch_items("result_acks", 4))

    assert (acks[good].status, acks[good].job_state) == (
        pb.ResultAck.STATUS_ACCEPTED,
        job_pb2.JOB_STATE_SUCCEEDED,
    )
    assert (acks[not_reportable].status, acks[not_reportable].reason) == (
        pb.ResultAck.STATUS_REJECTED,
        "UNKNOWN_ENUM",
    )
    assert (acks[bad_delay].status, acks[bad_delay].reason) == (
        pb.ResultAck.STATUS_REJECTED,
        "INVALID_DURATION",
    )
    assert (acks[negative_delay].status, acks[negative_delay].job_state) == (
        pb.ResultAck.STATUS_ACCEPTED,
        job_pb2.JOB_STATE_FAILED,
    )
    info = await client.get(jobs[good])
    assert (info.state, info.output) == (JobState.SUCCEEDED, b"kept")
    for rejected in (not_reportable, bad_delay):
        assert (await client.get(jobs[rejected])).state is JobState.RUNNING  # nothing changed
    failed = await client.get(jobs[negative_delay])
    assert (failed.state, failed.last_error_code) == (JobState.FAILED, "negative_retry_delay")


async def test_a_release_and_a_start_in_one_batch(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    await client.enqueue_many([Echo("give back"), Echo("keep"), Echo("both")])
    worker = open_worker(coordinator, workers, "release-and-start", capacity=3)
    await welcomed(worker)
    given_back, kept, both = await claimed(worker, 3)

    worker.send_batch(
        releases=[pb.Release(attempt_id=a.attempt_id) for a in (given_back, both)],
        starts=[pb.StartRequest(attempt_id=a.attempt_id) for a in (kept, both)],
    )
    answers = by_attempt(await worker.batch_items("start_answers", 2))
    assert answers[kept.attempt_id].granted
    # Releases go first: a claim released and started in one batch is given back, and
    # its start refused, uncharged.
    assert not answers[both.attempt_id].granted
    for released_id in (given_back.job_id, both.job_id):
        released = await client.get(released_id)  # written by now: it went before the starts
        assert (released.state, released.executions, released.current_attempt_id) == (
            JobState.AVAILABLE,
            0,
            None,
        )
    assert (await client.get(kept.job_id)).state is JobState.RUNNING

    # Their slots are free again: credit brings the jobs back under new attempts, uncharged.
    worker.send_batch(credit=2)
    again = await worker.batch_items("assignments", 2)
    assert sorted(a.job_id for a in again) == sorted([given_back.job_id, both.job_id])
    assert {a.attempt_id for a in again}.isdisjoint({given_back.attempt_id, both.attempt_id})
    assert [a.execution_number for a in again] == [1, 1]


# -- what ends the stream -----------------------------------------------------------------


async def test_negative_credit_in_a_batch_ends_the_stream_and_hands_nothing_on(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    job_id = await client.enqueue(Echo("never started"))
    worker = open_worker(coordinator, workers, "negative-credit")
    await welcomed(worker)
    [assignment] = await claimed(worker, 1)

    worker.send_batch(starts=[pb.StartRequest(attempt_id=assignment.attempt_id)], credit=-1)
    error = await stream_error(worker)

    assert (error.status_code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "OUT_OF_RANGE")
    assert [v.field for v in error.field_violations] == ["batch.credit"]
    assert "start_answer" not in worker.kinds() and not worker_start_answers(worker)
    await eventually(lambda: "negative-credit" not in coordinator.connected_workers())
    await dispatcher_caught_up(coordinator, workers)
    info = await client.get(job_id)
    assert (info.state, info.executions) == (JobState.RESERVED, 0), "the start was not handed on"


def worker_start_answers(worker: RawWorker) -> list[pb.StartAnswer]:
    return [s for m in worker.received if m.WhichOneof("kind") == "batch" for s in m.batch.start_answers]


@pytest.mark.parametrize("kind", ["releases", "starts", "results"])
async def test_more_than_ten_thousand_items_of_a_kind_end_the_stream_and_hand_nothing_on(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker], kind: str
) -> None:
    job_id = await client.enqueue(Echo("never started"))
    worker = open_worker(coordinator, workers, f"too-many-{kind}")
    await welcomed(worker)
    [assignment] = await claimed(worker, 1)
    good_start = pb.StartRequest(attempt_id=assignment.attempt_id)
    unknown = [str(uuid.uuid4()) for _ in range(MAX_ITEMS + 1)]
    if kind == "starts":  # the good start is one of the 10,001
        batch = pb.WorkerBatch(starts=[good_start] + [pb.StartRequest(attempt_id=a) for a in unknown[1:]])
    elif kind == "releases":
        batch = pb.WorkerBatch(starts=[good_start], releases=[pb.Release(attempt_id=a) for a in unknown])
    else:
        batch = pb.WorkerBatch(starts=[good_start], results=[succeeded(a) for a in unknown])
    worker.send(batch=batch)

    error = await stream_error(worker)

    assert (error.status_code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "OUT_OF_RANGE")
    assert [v.field for v in error.field_violations] == [f"batch.{kind}"]
    assert not worker_start_answers(worker)
    await dispatcher_caught_up(coordinator, workers)
    info = await client.get(job_id)
    assert (info.state, info.executions) == (JobState.RESERVED, 0), "the start was not handed on"


async def test_ten_thousand_items_of_a_kind_are_answered(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    job_id = await client.enqueue(Echo("started among many"))
    worker = open_worker(coordinator, workers, "ten-thousand-starts")
    await welcomed(worker)
    [assignment] = await claimed(worker, 1)
    attempts = [assignment.attempt_id] + [str(uuid.uuid4()) for _ in range(MAX_ITEMS - 1)]

    worker.send_batch(starts=[pb.StartRequest(attempt_id=a) for a in attempts])
    answers = await worker.batch_items("start_answers", MAX_ITEMS, timeout=60)

    assert [a.attempt_id for a in answers] == attempts
    assert [a.granted for a in answers] == [True] + [False] * (MAX_ITEMS - 1)
    assert (await client.get(job_id)).state is JobState.RUNNING


# -- fencing per item ---------------------------------------------------------------------


async def test_a_batch_naming_another_workers_attempts_is_refused_item_by_item(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    await client.enqueue_many([Echo("reserved"), Echo("running")])
    owner = open_worker(coordinator, workers, "owner", capacity=2)
    await welcomed(owner)
    reserved, started = await claimed(owner, 2)
    owner.send_batch(starts=[pb.StartRequest(attempt_id=started.attempt_id)])
    [granted] = await owner.batch_items("start_answers", 1)
    assert granted.granted

    forger = open_worker(coordinator, workers, "forger")
    await welcomed(forger)
    forger.send_batch(
        releases=[pb.Release(attempt_id=reserved.attempt_id)],
        starts=[pb.StartRequest(attempt_id=a.attempt_id) for a in (reserved, started)],
        results=[succeeded(started.attempt_id, b"forged")],
    )
    answers = by_attempt(await forger.batch_items("start_answers", 2))
    [ack] = await forger.batch_items("result_acks", 1)

    for attempt in (reserved, started):
        answer = answers[attempt.attempt_id]
        assert (answer.granted, answer.reason) == (False, "attempt held by another worker")
    assert (ack.attempt_id, ack.status, ack.reason) == (
        started.attempt_id,
        pb.ResultAck.STATUS_REJECTED,
        "ATTEMPT_NOT_HELD",
    )
    # Nothing changed: the release was not the forger's to make, nor the result.
    still_reserved = await client.get(reserved.job_id)
    assert (still_reserved.state, still_reserved.current_attempt_id) == (
        JobState.RESERVED,
        reserved.attempt_id,
    )
    still_running = await client.get(started.job_id)
    assert (still_running.state, still_running.output) == (JobState.RUNNING, None)

    owner.send_batch(
        starts=[pb.StartRequest(attempt_id=reserved.attempt_id)],
        results=[succeeded(started.attempt_id, b"real")],
    )
    [start] = await owner.batch_items("start_answers", 1)
    [real] = await owner.batch_items("result_acks", 1)
    assert start.granted and real.status == pb.ResultAck.STATUS_ACCEPTED
    done = await client.get(started.job_id)
    assert (done.state, done.output) == (JobState.SUCCEEDED, b"real")
    assert (await client.get(reserved.job_id)).state is JobState.RUNNING


async def test_a_stream_ended_by_a_batch_does_not_disturb_another(
    coordinator: Coordinator, client: AsyncClient, workers: list[RawWorker]
) -> None:
    """The violation is the offending stream's alone: another batch stream carries on."""
    job_id = await client.enqueue(Echo("carries on"))
    steady = open_worker(coordinator, workers, "steady")
    rude = open_worker(coordinator, workers, "rude")
    await asyncio.gather(welcomed(steady), welcomed(rude))
    rude.send_batch(credit=-5)
    assert (await stream_error(rude)).reason == "OUT_OF_RANGE"

    [assignment] = await claimed(steady, 1)
    assert assignment.job_id == job_id
    steady.send_batch(starts=[pb.StartRequest(attempt_id=assignment.attempt_id)])
    [start] = await steady.batch_items("start_answers", 1)
    assert start.granted
    steady.send_batch(results=[succeeded(assignment.attempt_id)])
    [ack] = await steady.batch_items("result_acks", 1)
    assert ack.status == pb.ResultAck.STATUS_ACCEPTED
    assert (await client.get(job_id)).state is JobState.SUCCEEDED
