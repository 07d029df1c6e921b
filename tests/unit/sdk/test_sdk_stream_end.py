"""Streams the coordinator ends (connection-age rotation, a failed batch, a revoked
token) are torn down cleanly: no asyncio ERROR about a pending task or a running
generator, and the worker reconnects and keeps running jobs."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from worker_sdk import JobContext, Worker, job
from worker_sdk.proto.runwick.v1 import job_pb2

if TYPE_CHECKING:
    from conftest import FakeCoordinator, FakeStream

MakeWorker = Callable[..., Worker]

_SYMPTOMS = ("Task was destroyed but it is pending", "asynchronous generator is already running")


@job("images.resize")
@dataclass
class Resize:
    path: str


class _Records(logging.Handler):
    """Every record reaching a logger, whatever the root logger's level."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def asyncio_records() -> Iterator[_Records]:
    handler = _Records()
    target = logging.getLogger("asyncio")
    target.addHandler(handler)
    try:
        yield handler
    finally:
        target.removeHandler(handler)


def _errors(records: _Records) -> list[str]:
    return [
        record.getMessage()
        for record in records.records
        if record.levelno >= logging.ERROR or any(s in record.getMessage() for s in _SYMPTOMS)
    ]


async def _run_one(stream: FakeStream, attempt_id: str) -> None:
    stream.assign(Resize(f"{attempt_id}.png"), attempt_id)
    await stream.next_where("start", lambda start: start.attempt_id == attempt_id)
    stream.grant(attempt_id)
    result = await stream.next_where("result", lambda result: result.attempt_id == attempt_id)
    assert (result.outcome, result.output) == (job_pb2.OUTCOME_SUCCEEDED, b"ok")
    stream.ack(attempt_id)


async def test_streams_ended_by_the_coordinator_leave_no_asyncio_errors(
    coordinator: FakeCoordinator, make_worker: MakeWorker, asyncio_records: _Records
) -> None:
    async def resize(job: Resize, ctx: JobContext) -> bytes:
        return b"ok"

    worker = make_worker(concurrency=1)
    worker.handler(Resize)(resize)
    await worker.start()
    for round_number in range(6):
        stream, _ = await coordinator.accept()
        await stream.next("credit")
        await _run_one(stream, f"att-{round_number}")
        await stream.next("credit")  # the acknowledged slot is offered again: the worker is idle
        # Alternate a clean end (status OK, like a connection-age rotation) and an abort.
        if round_number % 2:
            stream.drop()
        else:
            stream.end()
        await stream.closed.wait()

    last, _ = await coordinator.accept()
    await last.next("credit")
    gc.collect()  # what the ended streams left behind is collected now, not at exit
    # A job through the new stream takes many loop turns: finalizers gc scheduled ran.
    await _run_one(last, "att-last")
    gc.collect()
    assert _errors(asyncio_records) == []
