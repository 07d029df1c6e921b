"""The execution lifecycle end to end: real gRPC on port 0, real database of each engine,
real worker processes (R-1, R-2, R-5, R-7, R-12)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import Coordinator
from tests.integration.worker_app import (
    AlwaysFails,
    BlockUntil,
    CooperativeSleep,
    Echo,
    Permanent,
    StubbornSleep,
)
from tests.support import eventually
from worker_sdk import AsyncClient, JobState, Outcome

pytestmark = pytest.mark.slow
WAIT = timedelta(seconds=30)


async def test_r5_success_runs_once_in_a_worker_process(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
):
    spawn_worker(coordinator.target)
    job_id = await client.enqueue(Echo("hello"))

    info = await client.wait(job_id, WAIT)

    assert info.state is JobState.SUCCEEDED
    assert info.output == b"hello (execution 1)"
    assert info.executions == 1
    [attempt] = await client.attempts(job_id)
    assert attempt.outcome is Outcome.SUCCEEDED
    assert attempt.execution_number == 1
    assert attempt.started_at is not None and attempt.finished_at is not None


async def test_r1_r2_retries_until_failed_with_every_attempt_recorded(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
):
    client.configure_job(AlwaysFails).with_max_executions(3).with_retry_delay(
        timedelta(milliseconds=1), timedelta(milliseconds=4)
    )
    spawn_worker(coordinator.target)
    job_id = await client.enqueue(AlwaysFails())

    info = await client.wait(job_id, WAIT)

    assert info.state is JobState.FAILED
    assert info.executions == 3
    assert info.last_error_code == "InventoryError"
    attempts = await client.attempts(job_id)
    assert [a.execution_number for a in attempts] == [1, 2, 3]
    assert all(a.outcome is Outcome.RETRYABLE_FAILURE for a in attempts)
    assert all(a.error_code == "InventoryError" for a in attempts)
    assert all(a.exception_type and a.exception_type.endswith("InventoryError") for a in attempts)
    # the chosen delay is stored with each retried outcome, within the equal-jitter range.
    assert attempts[0].retry_delay is not None
    assert timedelta(microseconds=500) <= attempts[0].retry_delay <= timedelta(milliseconds=1)
    assert attempts[1].retry_delay is not None
    assert timedelta(milliseconds=1) <= attempts[1].retry_delay <= timedelta(milliseconds=2)
    assert attempts[2].retry_delay is None  # the last execution fails the job: no retry


async def test_r5_permanent_failure_is_not_retried(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
):
    spawn_worker(coordinator.target)
    job_id = await client.enqueue(Permanent("o-404"))

    info = await client.wait(job_id, WAIT)

    assert info.state is JobState.FAILED
    assert info.executions == 1
    assert info.last_error_code == "order_not_found"
    [attempt] = await client.attempts(job_id)
    assert attempt.outcome is Outcome.PERMANENT_FAILURE


async def test_r7_timeout_with_a_cooperative_handler_is_recorded_timed_out(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
):
    client.configure_job(CooperativeSleep).with_execution_timeout(
        timedelta(milliseconds=300)
    ).with_max_executions(1)
    spawn_worker(coordinator.target, test_grace_ms=5_000)
    job_id = await client.enqueue(CooperativeSleep(seconds=30))

    info = await client.wait(job_id, WAIT)

    # The handler returned normally after noticing cancellation: still timed out.
    assert info.state is JobState.FAILED
    assert info.last_error_code == "timeout"
    [attempt] = await client.attempts(job_id)
    assert attempt.outcome is Outcome.TIMED_OUT


async def test_r7_handler_ignoring_cancellation_is_recovered_after_the_lease_lapses(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
):
    client.configure_job(StubbornSleep).with_execution_timeout(timedelta(milliseconds=200)).with_retry_delay(
        timedelta(milliseconds=1), timedelta(milliseconds=1)
    )
    worker = spawn_worker(coordinator.target, test_grace_ms=200, test_lease_ms=10_000)
    job_id = await client.enqueue(StubbornSleep(seconds=4))
    await eventually(
        lambda: "no result" in worker.log().lower() or "abandon" in worker.log().lower(), timeout=20
    )

    # The worker stopped renewing the lease and wrote no result: the job is still running.
    assert (await client.get(job_id)).state is JobState.RUNNING
    await coordinator.lapse_first_lease(client, job_id, lease_ms=10_000)
    info = await client.wait(job_id, WAIT)

    assert info.state is JobState.SUCCEEDED
    assert info.executions == 2
    first, second = await client.attempts(job_id)
    assert first.outcome is Outcome.ABANDONED
    assert first.error_code == "lease_expired"
    assert second.outcome is Outcome.SUCCEEDED


async def test_r5_kill_9_during_a_run_reruns_after_the_lease_charging_one_execution(
    coordinator: Coordinator, client: AsyncClient, spawn_worker, tmp_path: Path
):
    client.configure_job(BlockUntil).with_retry_delay(timedelta(milliseconds=1), timedelta(milliseconds=1))
    started, release = tmp_path / "started", tmp_path / "release"
    victim = spawn_worker(coordinator.target, test_lease_ms=5_000)
    job_id = await client.enqueue(BlockUntil(str(started), str(release)))
    await eventually(started.exists)

    await victim.kill9()
    started.unlink()
    release.write_text("go")
    assert (await client.get(job_id)).state is JobState.RUNNING
    await coordinator.lapse_first_lease(client, job_id, lease_ms=5_000)
    spawn_worker(coordinator.target)

    info = await client.wait(job_id, WAIT)
    assert info.state is JobState.SUCCEEDED
    assert info.executions == 2
    first, second = await client.attempts(job_id)
    assert (first.outcome, first.execution_number, first.error_code) == (
        Outcome.ABANDONED,
        1,
        "lease_expired",
    )
    assert (second.outcome, second.execution_number) == (Outcome.SUCCEEDED, 2)


async def test_r12_sigterm_drain_ends_unfinished_runs_interrupted(
    coordinator: Coordinator, client: AsyncClient, spawn_worker, tmp_path: Path
):
    client.configure_job(BlockUntil).with_retry_delay(timedelta(minutes=1), timedelta(minutes=1))
    started = tmp_path / "started"
    worker = spawn_worker(coordinator.target, test_drain_ms=300, test_grace_ms=2_000)
    job_id = await client.enqueue(BlockUntil(str(started), str(tmp_path / "never")))
    await eventually(started.exists)

    exit_code = await worker.terminate()

    assert exit_code == 0, worker.log()
    info = await client.get(job_id)
    assert info.state is JobState.SCHEDULED  # interrupted is retryable
    assert info.executions == 1
    assert info.last_error_code == "worker_shutdown"
    [attempt] = await client.attempts(job_id)
    assert attempt.outcome is Outcome.INTERRUPTED


async def test_drain_lets_a_short_run_finish(coordinator: Coordinator, client: AsyncClient, spawn_worker):
    worker = spawn_worker(coordinator.target, test_drain_ms=10_000)
    job_id = await client.enqueue(CooperativeSleep(seconds=0.5))
    await eventually(coordinator.connected_workers)
    await eventually(lambda: _state_is(coordinator, job_id, "running"))

    assert await worker.terminate() == 0, worker.log()

    info = await client.get(job_id)
    assert info.state is JobState.SUCCEEDED
    assert info.output == b"slept"


def _state_is(coordinator: Coordinator, job_id: str, state: str) -> bool:
    job = coordinator.running.store.get_job(job_id)
    return job is not None and job.state.value == state
