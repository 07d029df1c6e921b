"""Progress reports end to end: a real worker process's handler reports progress in
steps; GetJob, ``runwick jobs get`` (text and JSON) show the latest; several reports
between heartbeats are stored as one, the last; bad reports raise in the handler and
never reach the coordinator. Both engines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator
from tests.integration.progress_app import ProgressBad, ProgressBurst, ProgressSteps, ProgressStepsSync
from tests.support import WorkerProcess, eventually_async
from worker_sdk import AsyncClient, JobState, ProgressReport

APP = "tests.integration.progress_app:worker"


async def _progress(client: AsyncClient, job_id: str) -> ProgressReport | None:
    return (await client.get(job_id)).progress


@pytest.mark.parametrize("payload_type", [ProgressSteps, ProgressStepsSync])
async def test_a_handler_reports_in_steps_and_get_job_and_the_cli_show_the_latest(
    coordinator: Coordinator,
    client: AsyncClient,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    payload_type: type[ProgressSteps] | type[ProgressStepsSync],
) -> None:
    spawn_worker(coordinator.target, app=APP)
    job_id = await client.enqueue(payload_type(str(tmp_path), 3))
    assert (await client.get(job_id)).progress is None  # nothing reported yet

    for step in (1, 2, 3):
        (tmp_path / f"go-{step}").write_text("")
        expected = ProgressReport(float(step), 3.0, f"resizing images, step {step}")

        async def shows_step(expected: ProgressReport = expected) -> bool:
            return await _progress(client, job_id) == expected

        await eventually_async(shows_step, what=f"GetJob shows step {step}")

    target = ("--target", coordinator.target)
    shown = await runwick("jobs", "get", job_id, *target)
    progress_lines = [line for line in shown.stdout.splitlines() if line.strip().startswith("progress")]
    assert len(progress_lines) == 1
    assert progress_lines[0].split(None, 1)[1] == "3/3 (100%) resizing images, step 3"
    as_json = json.loads((await runwick("jobs", "get", job_id, "--json", *target)).stdout)
    assert as_json["job"]["progress"] == {"done": 3.0, "total": 3.0, "message": "resizing images, step 3"}

    (tmp_path / "finish").write_text("")
    finished = await client.wait(job_id)
    assert finished.state is JobState.SUCCEEDED
    # Progress is the running attempt's: an ended job has no current attempt.
    assert (await _progress(client, job_id)) is None


async def test_reports_made_between_heartbeats_are_stored_as_one_the_last(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    spawn_worker(coordinator.target, app=APP, test_heartbeat_ms=300)
    job_id = await client.enqueue(ProgressBurst(str(tmp_path), 500))

    async def shows_the_last() -> bool:
        return await _progress(client, job_id) == ProgressReport(500.0, 500.0, "item 500")

    await eventually_async(shows_the_last, what="the last of the burst stored")
    (tmp_path / "release").write_text("")
    assert (await client.wait(job_id)).state is JobState.SUCCEEDED


async def test_bad_reports_raise_in_the_handler_and_never_reach_the_coordinator(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    spawn_worker(coordinator.target, app=APP)
    job_id = await client.enqueue(ProgressBad())
    finished = await client.wait(job_id)
    assert finished.state is JobState.SUCCEEDED
    assert finished.output is not None
    outcome = json.loads(finished.output)
    assert len(outcome["raised"]) == 6 and outcome["kept"] is False
    assert any("not negative" in text for text in outcome["raised"])
    assert any("257 characters" in text for text in outcome["raised"])
    assert (await _progress(client, job_id)) is None
