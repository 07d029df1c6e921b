"""Cancel (R-8) and manual retry (R-9) end to end: real gRPC, real worker processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import BlockUntil, Echo, FailsUntilFile
from tests.support import eventually
from worker_sdk import AsyncClient, FailedPrecondition, JobNotFound, JobState, Outcome
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

pytestmark = pytest.mark.slow
WAIT = timedelta(seconds=30)


async def test_r8_cancel_of_a_running_job_stops_the_handler_in_the_worker_process(
    coordinator: Coordinator, client: AsyncClient, spawn_worker, tmp_path: Path
) -> None:
    worker = spawn_worker(coordinator.target)
    started = tmp_path / "started"
    job_id = await client.enqueue(BlockUntil(str(started), str(tmp_path / "never")))
    await eventually(started.exists)

    requested = await client.cancel(job_id)

    assert (requested.state, requested.cancel_requested) == (JobState.RUNNING, True)
    info = await client.wait(job_id, WAIT)
    assert (info.state, info.last_error_code, info.output) == (JobState.CANCELLED, "cancelled", None)
    [attempt] = await client.attempts(job_id)
    assert (attempt.outcome, attempt.error_code, attempt.execution_number) == (
        Outcome.CANCELLED,
        "cancelled",
        1,
    )
    assert "cancelled by the coordinator" in worker.log()
    with pytest.raises(FailedPrecondition, match="already cancelled"):
        await client.cancel(job_id)


async def test_r8_with_the_worker_gone_the_job_ends_cancelled_when_the_lease_lapses(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    job_id = await client.enqueue(Echo("never finished"))
    worker = RawWorker(coordinator.target, "doomed-worker", ["tests.echo"], lease_ms=5_000)
    try:
        assignment = await worker.claim()
        assert (await worker.start(assignment.attempt_id)).granted
        await client.cancel(job_id)
        cancel = await worker.next("cancel")  # pushed over the stream at once
        assert isinstance(cancel, pb.Cancel) and cancel.attempt_id == assignment.attempt_id
    finally:
        await worker.close()  # gone without reporting anything

    assert (await client.get(job_id)).state is JobState.RUNNING
    await coordinator.jump(5_001)

    info = await client.get(job_id)
    assert (info.state, info.executions, info.last_error_code) == (JobState.CANCELLED, 1, "cancelled")
    [attempt] = await client.attempts(job_id)
    assert (attempt.outcome, attempt.error_code) == (Outcome.ABANDONED, "lease_expired")
    await coordinator.jump(3_600_000)
    assert (await client.get(job_id)).state is JobState.CANCELLED  # never retried


async def test_r8_queued_jobs_end_cancelled_at_once(coordinator: Coordinator, client: AsyncClient) -> None:
    now = await client.enqueue(Echo("now"))
    later = await client.enqueue(Echo("later"), run_at=datetime.now(UTC) + timedelta(hours=1))

    assert (await client.cancel(now)).state is JobState.CANCELLED
    assert (await client.cancel(later)).state is JobState.CANCELLED
    assert (await client.wait(now, timedelta(seconds=1))).terminal  # waiters are woken
    with pytest.raises(JobNotFound):
        await client.cancel("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")


async def test_r9_manual_retry_after_failed_runs_again_with_a_fresh_budget(
    coordinator: Coordinator, client: AsyncClient, spawn_worker, tmp_path: Path
) -> None:
    marker = tmp_path / "fixed"
    client.configure_job(FailsUntilFile).with_max_executions(2).with_retry_delay(
        timedelta(milliseconds=1), timedelta(milliseconds=2)
    )
    spawn_worker(coordinator.target)
    job_id = await client.enqueue(FailsUntilFile(str(marker)))
    failed = await client.wait(job_id, WAIT)
    assert (failed.state, failed.executions, failed.generation) == (JobState.FAILED, 2, 1)
    with pytest.raises(FailedPrecondition, match="failed or cancelled"):
        await client.retry(await client.enqueue(Echo("not failed")))
    marker.write_text("the operator fixed the cause")

    retried = await client.retry(job_id)

    assert (retried.state, retried.generation, retried.executions) in {
        (JobState.AVAILABLE, 2, 0),
        (JobState.RESERVED, 2, 0),
    }
    info = await client.wait(job_id, WAIT)
    assert (info.state, info.generation, info.executions) == (JobState.SUCCEEDED, 2, 1)
    assert info.output == b"found it in generation 2"
    attempts = await client.attempts(job_id)
    assert [(a.generation, a.execution_number, a.outcome) for a in attempts] == [
        (1, 1, Outcome.RETRYABLE_FAILURE),
        (1, 2, Outcome.RETRYABLE_FAILURE),
        (2, 1, Outcome.SUCCEEDED),
    ]
    revealed = await client.reveal_error(attempts[0].id)
    assert "is missing (execution 1)" in revealed.message and "InventoryError" in revealed.detail
