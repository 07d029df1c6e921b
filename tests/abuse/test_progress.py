"""Progress reports attacked over a raw worker stream: a late report of a lost attempt,
one for another stream's attempt, and malformed ones. A real coordinator on port 0,
both engines: the functional outcome is that no stored progress changes but the held
attempt's own, and the coordinator keeps serving."""

from __future__ import annotations

import math
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from coordinator.domain.progress import Progress, decode_progress
from tests.integration.conftest import Coordinator, client, coordinator  # noqa: F401  (the fixtures)
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from worker_sdk import AsyncClient
from worker_sdk.proto.runwick.v1 import job_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

LEASE_MS = 1_000


def report(attempt_id: str, done: float, total: float | None = None, message: str = "") -> pb.ProgressReport:
    return pb.ProgressReport(
        attempt_id=attempt_id, progress=job_pb2.Progress(done=done, total=total, message=message)
    )


async def beat(worker: RawWorker, attempt_ids: list[str], *reports: pb.ProgressReport) -> list[str]:
    """Sends one heartbeat with ``reports``; returns the attempts it answers lost."""
    lease = Duration()
    lease.FromMilliseconds(LEASE_MS)
    worker.send(heartbeat=pb.Heartbeat(attempt_ids=attempt_ids, lease=lease, progress=list(reports)))
    answer: Any = await worker.next("heartbeat_answer")
    return list(answer.lost_attempt_ids)


def stored(running: Coordinator, attempt_id: str) -> Progress | None:
    attempt = running.running.app.store.get_attempt(attempt_id)
    assert attempt is not None
    return decode_progress(attempt.progress)


async def running_attempt(running: Coordinator, worker_id: str) -> tuple[RawWorker, str]:
    worker = RawWorker(running.target, worker_id, ["tests.echo"], lease_ms=LEASE_MS)
    assignment = await worker.claim()
    assert (await worker.start(assignment.attempt_id)).granted
    return worker, assignment.attempt_id


async def test_a_late_report_of_a_lost_attempt_or_of_another_streams_attempt_changes_nothing(
    coordinator: Coordinator,  # noqa: F811
    client: AsyncClient,  # noqa: F811
) -> None:
    job_id = await client.enqueue(Echo("progress"))
    first, first_attempt = await running_attempt(coordinator, "first")
    assert await beat(first, [first_attempt], report(first_attempt, 1, 10, "first")) == []
    assert stored(coordinator, first_attempt) == Progress(1, 10, "first")

    await coordinator.lapse_first_lease(client, job_id, LEASE_MS)
    await coordinator.jump(3_600_000)  # past the retry delay: the job is claimable again
    second, second_attempt = await running_attempt(coordinator, "second")
    assert await beat(second, [second_attempt], report(second_attempt, 2, 10, "second")) == []

    # The lost attempt's worker reports late, for its own attempt and for the new one.
    lost = await beat(
        first,
        [first_attempt, second_attempt],
        report(first_attempt, 9, 10, "late"),
        report(second_attempt, 9, 10, "hijack"),
    )
    assert sorted(lost) == sorted([first_attempt, second_attempt])
    assert stored(coordinator, first_attempt) == Progress(1, 10, "first")
    assert stored(coordinator, second_attempt) == Progress(2, 10, "second")
    shown = (await client.get(job_id)).progress
    assert shown is not None and (shown.done, shown.message) == (2.0, "second")
    # The holder still reports.
    assert await beat(second, [second_attempt], report(second_attempt, 3, 10, "second")) == []
    assert stored(coordinator, second_attempt) == Progress(3, 10, "second")
    await first.close()
    await second.close()


MALFORMED = {
    "nan done": lambda a: [report(a, math.nan)],
    "negative total": lambda a: [report(a, 1, -1)],
    "infinite done": lambda a: [report(a, math.inf)],
    "message too long": lambda a: [report(a, 1, 2, "x" * 257)],
    "two for one attempt": lambda a: [report(a, 1), report(a, 2)],
    "more reports than attempts": lambda a: [report(a, 1), report("other", 2)],
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_report_ends_the_stream_and_stores_nothing(
    coordinator: Coordinator,  # noqa: F811
    client: AsyncClient,  # noqa: F811
    case: str,
) -> None:
    await client.enqueue(Echo("progress"))
    worker, attempt_id = await running_attempt(coordinator, "malformed")
    lease = Duration()
    lease.FromMilliseconds(LEASE_MS)
    heartbeat = pb.Heartbeat(attempt_ids=[attempt_id], lease=lease, progress=MALFORMED[case](attempt_id))
    worker.send(heartbeat=heartbeat)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await worker.next("heartbeat_answer")
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "heartbeat.progress" in (refused.value.details() or "")
    assert stored(coordinator, attempt_id) is None
    await worker.close()

    # The same worker reconnects and carries on: the coordinator still serves it.
    again = RawWorker(coordinator.target, "malformed", ["tests.echo"], lease_ms=LEASE_MS)
    assert await beat(again, [attempt_id], report(attempt_id, 1, 4, "fine")) == []
    assert stored(coordinator, attempt_id) == Progress(1, 4, "fine")
    await again.close()
