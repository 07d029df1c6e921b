"""The Worker's answer to a rejected result (docs/limits.md, ``ResultAck.STATUS_REJECTED``): an
output over the coordinator's ``max_output_bytes`` becomes ``output_too_large``; any
other rejection drops the result, which resending could not fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from worker_sdk import JobContext, Worker, job
from worker_sdk.proto.runwick.v1 import job_pb2, worker_service_pb2

if TYPE_CHECKING:
    from conftest import FakeCoordinator

MakeWorker = Callable[..., Worker]
Ack = worker_service_pb2.ResultAck


@job("reports.render")
@dataclass
class Render:
    pages: int


def _worker(make_worker: MakeWorker) -> Worker:
    worker = make_worker(max_output_bytes=1_000_000)

    @worker.handler(Render)
    async def render(job: Render, ctx: JobContext) -> bytes:
        return b"p" * job.pages

    return worker


async def test_s5_output_rejected_as_too_large_is_reported_as_output_too_large(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    await _worker(make_worker).start()
    stream, _ = await coordinator.accept()
    stream.assign(Render(70_000), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    first = await stream.next("result")
    assert (first.outcome, len(first.output)) == (job_pb2.OUTCOME_SUCCEEDED, 70_000)
    assert (await stream.next("credit")).count == 1  # the slot is free once the result is sent

    message = "job j: output is 70000 bytes, over the limit of 65536 bytes (max_output_bytes)"
    stream.send(
        result_ack=Ack(
            attempt_id="att-1", status=Ack.STATUS_REJECTED, reason="OUTPUT_TOO_LARGE", message=message
        )
    )
    again = await stream.next("result")

    assert (again.attempt_id, again.outcome, again.error_code) == (
        "att-1",
        job_pb2.OUTCOME_PERMANENT_FAILURE,
        "output_too_large",
    )
    assert (again.output, again.message) == (b"", message)
    credits = len(stream.kinds("credit"))
    stream.ack("att-1")
    await stream.round_trip(Render(1))  # a credit sent before it has arrived
    assert len(stream.kinds("credit")) == credits, "the replacement and its ack neither take nor free a slot"
    stream.refuse("att-marker")
    assert (await stream.next("credit")).count == 1


async def test_s5_other_rejections_drop_the_result_and_free_the_slot(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    await _worker(make_worker).start()
    stream, _ = await coordinator.accept()
    stream.assign(Render(3), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    await stream.next("result")

    stream.send(result_ack=Ack(attempt_id="att-1", status=Ack.STATUS_REJECTED, reason="ATTEMPT_NOT_FOUND"))

    assert (await stream.next("credit")).count == 1
    assert len(stream.kinds("result")) == 1, "a rejected result is not resent"


async def test_s5_output_too_large_for_a_failure_is_not_rewritten(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    """Only a success can be over the output bound: a rejection of anything else is dropped."""
    worker = make_worker()

    @worker.handler(Render)
    async def render(job: Render, ctx: JobContext) -> bytes:
        raise RuntimeError("no")

    await worker.start()
    stream, _ = await coordinator.accept()
    stream.assign(Render(1), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    assert (await stream.next("result")).outcome == job_pb2.OUTCOME_RETRYABLE_FAILURE
    stream.send(result_ack=Ack(attempt_id="att-1", status=Ack.STATUS_REJECTED, reason="OUTPUT_TOO_LARGE"))
    assert (await stream.next("credit")).count == 1
    assert len(stream.kinds("result")) == 1
