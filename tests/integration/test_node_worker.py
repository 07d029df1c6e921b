"""A worker in another language: ``examples/node-worker`` (Node.js, grpc-js and
proto-loader reading the repository's .proto files) against a real coordinator with
authentication on, over each engine.

Its npm dependencies are installed by ``tests/run.sh`` (``npm ci`` in the example's
folder, from the committed lock file); without them, or without ``node``, these fail.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.support import ROOT, tool
from tests.support.polling import eventually_async
from worker_sdk import AsyncClient, JobState, Outcome

EXAMPLE = ROOT / "examples" / "node-worker"

pytestmark = pytest.mark.slow


@dataclass
class Secured:
    running: RunningCoordinator
    admin: AsyncClient

    @property
    def target(self) -> str:
        return self.running.target

    async def token(self, *scopes: str) -> str:
        created = await self.admin.create_token(f"node-{'-'.join(scopes)}", list(scopes))
        return created.secret


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[Secured]:
    config = CoordinatorConfig(database_url=database_url, port=0, auth_enabled=True, drain_timeout_s=2)
    running = await start_coordinator(config)
    assert running.bootstrap_token is not None
    async with AsyncClient(running.target, token=running.bootstrap_token) as admin:
        yield Secured(running, admin)
    await running.stop(grace_s=1)


@dataclass
class NodeRun:
    returncode: int
    log: str


async def run_node_worker(target: str, token: str, log: Path, *, exit_after: int) -> NodeRun:
    """Runs ``node examples/node-worker/worker.js`` until it exits by itself."""
    assert (EXAMPLE / "node_modules" / "@grpc" / "grpc-js").is_dir(), (
        "examples/node-worker has no node_modules: run `npm ci --prefix examples/node-worker` "
        "(tests/run.sh does)"
    )
    environment = {
        **os.environ,
        "RUNWICK_TARGET": target,
        "RUNWICK_TOKEN": token,
        "RUNWICK_EXIT_AFTER": str(exit_after),
        "RUNWICK_LEASE_MS": "10000",
    }
    with log.open("w") as out:
        process = await asyncio.create_subprocess_exec(
            tool("node"), str(EXAMPLE / "worker.js"), env=environment, stdout=out, stderr=out
        )
        try:
            returncode = await asyncio.wait_for(process.wait(), 60)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    return NodeRun(returncode, log.read_text())


async def test_the_node_worker_runs_jobs_end_to_end(secured: Secured, tmp_path: Path) -> None:
    """A success with its output, and a permanent failure with its code, reported by a
    worker that knows the protocol only from the .proto files."""
    admin = secured.admin
    greet = (await admin.enqueue_raw("examples.greet", json.dumps({"name": "Ada"}).encode())).id
    nameless = (await admin.enqueue_raw("examples.greet", b'{"name": ""}')).id

    token = await secured.token("work")
    run = await run_node_worker(secured.target, token, tmp_path / "node.log", exit_after=2)

    assert run.returncode == 0, run.log
    job = await admin.get(greet)
    assert job.state is JobState.SUCCEEDED, run.log
    assert json.loads(job.output or b"") == {"greeting": "Hello, Ada!"}
    assert job.executions == 1
    failed = await admin.get(nameless)
    assert failed.state is JobState.FAILED, run.log
    assert failed.last_error_code == "name_missing"
    (attempt,) = await admin.attempts(nameless)
    assert attempt.outcome is Outcome.PERMANENT_FAILURE
    assert attempt.exception_type == "PermanentFailure"
    assert "-node-" in attempt.worker_id  # the Hello worker_id of the Node process


async def test_the_node_worker_stops_a_cancelled_job(secured: Secured, tmp_path: Path) -> None:
    """Cancel over the stream: the run stops and the job ends cancelled, not retried."""
    admin = secured.admin
    job_id = (await admin.enqueue_raw("examples.wait", b'{"seconds": 600}')).id
    worker = asyncio.create_task(
        run_node_worker(secured.target, await secured.token("work"), tmp_path / "node.log", exit_after=1)
    )

    async def running() -> bool:
        return (await admin.get(job_id)).state is JobState.RUNNING

    await eventually_async(running, timeout=30)
    await admin.cancel(job_id)
    run = await worker

    assert run.returncode == 0, run.log
    job = await admin.get(job_id)
    assert job.state is JobState.CANCELLED, run.log
    (attempt,) = await admin.attempts(job_id)
    assert attempt.outcome is Outcome.CANCELLED
    assert attempt.error_code == "cancelled"


async def test_the_node_worker_enforces_the_execution_timeout(secured: Secured, tmp_path: Path) -> None:
    """The worker, not the coordinator, enforces the job's execution timeout (R-7): a
    600 s wait with a 300 ms timeout ends timed out, its one execution spent."""
    assert secured.running.bootstrap_token is not None
    async with AsyncClient(secured.target, token=secured.running.bootstrap_token) as client:
        client.job_defaults(execution_timeout=timedelta(milliseconds=300))
        job_id = (await client.enqueue_raw("examples.wait", b'{"seconds": 600}', max_executions=1)).id

    token = await secured.token("work")
    run = await run_node_worker(secured.target, token, tmp_path / "node.log", exit_after=1)

    assert run.returncode == 0, run.log
    job = await secured.admin.get(job_id)
    assert job.state is JobState.FAILED, run.log
    assert job.last_error_code == "timeout"
    (attempt,) = await secured.admin.attempts(job_id)
    assert attempt.outcome is Outcome.TIMED_OUT


async def test_a_token_without_the_work_scope_is_refused(secured: Secured, tmp_path: Path) -> None:
    """Connect needs `work`: the worker says why and exits 1; the job is left as it was."""
    job_id = (await secured.admin.enqueue_raw("examples.greet", b'{"name": "Ada"}')).id

    token = await secured.token("read")
    run = await run_node_worker(secured.target, token, tmp_path / "node.log", exit_after=1)

    assert run.returncode == 1
    assert "PERMISSION_DENIED" in run.log
    job = await secured.admin.get(job_id)
    assert job.state is JobState.AVAILABLE
    assert job.current_attempt_id is None
