"""Retention and purge (R-19) end to end: ``runwick purge`` against a real coordinator
(asking first, on a terminal only), the ``PurgeJobs`` RPC's refusals, and ``runwick
serve``'s retention flags purging by themselves."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.states import JobState as StoreState
from coordinator.domain.states import Outcome
from coordinator.service.work import AttemptMessage, ClaimRequest, ResultReport, WorkBatch
from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator
from tests.support import ROOT, eventually_async, runwick_command, serve, stop, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk import ArgumentError, AsyncClient, JobNotFound, JobState
from worker_sdk.proto.runwick.v1 import admin_service_pb2, admin_service_pb2_grpc, job_pb2

pytestmark = pytest.mark.slow

HOUR_MS = 3_600_000


async def _cancelled(client: AsyncClient, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        job_id = (await client.enqueue_raw("tests.retention", b"{}", queue="retention")).id
        await client.cancel(job_id)
        ids.append(job_id)
    return ids


async def _succeeded(coordinator: Coordinator) -> str:
    """A job run to success through the coordinator's own worker operations."""
    app = coordinator.running.app

    def work() -> str:
        [enqueued] = app.jobs.enqueue([NewJobSpec("tests.retention", b"{}", queue="ran")])
        claim = ClaimRequest("w", ("ran",), ("tests.retention",), 1, 60_000)
        [claimed] = app.ops.process(WorkBatch(claims=[claim])).claims[0]
        worker = WorkerIdentity("w")
        app.ops.process(WorkBatch(starts=[AttemptMessage(claimed.attempt_id, worker)]))
        report = ResultReport(claimed.attempt_id, Report(Outcome.SUCCEEDED), b"done", sender=worker)
        app.ops.process(WorkBatch(results=[report]))
        return enqueued.job_id

    job_id = await asyncio.to_thread(work)
    assert coordinator.running.store.get_job(job_id).state is StoreState.SUCCEEDED  # type: ignore[union-attr]
    return job_id


async def _exists(client: AsyncClient, job_id: str) -> bool:
    try:
        await client.get(job_id)
    except JobNotFound:
        return False
    return True


def _counts(coordinator: Coordinator) -> dict[str, int]:
    return coordinator.running.store.count_by_state()


async def test_purge_removes_the_jobs_older_than_asked_and_says_how_many(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    target = ("--target", coordinator.target)
    old = await _cancelled(client, 2)
    ran = await _succeeded(coordinator)
    await coordinator.jump(2 * HOUR_MS)
    young = await _cancelled(client, 1)

    purged = await runwick("purge", "--state", "cancelled", "--older-than", "1h", "--yes", *target)

    assert purged.stdout.strip() == "purged 2 cancelled job(s)"
    assert [await _exists(client, job_id) for job_id in [*old, *young, ran]] == [False, False, True, True]

    everything = await runwick("purge", "--state", "cancelled", "--older-than", "0", "-y", "--json", *target)
    assert json.loads(everything.stdout) == {"purged": 1, "state": "cancelled", "older_than_s": 0.0}
    succeeded = await runwick("purge", "--state", "succeeded", "--older-than", "1d12h", "--yes", *target)
    assert succeeded.stdout.strip() == "purged 0 succeeded job(s)"
    assert await _exists(client, ran)

    audit = json.loads((await runwick("audit", "--action", "jobs.purge", "--json", *target)).stdout)["events"]
    assert [(e["action"], e["target"]) for e in audit] == [
        ("jobs.purge", "succeeded"),
        ("jobs.purge", "cancelled"),
        ("jobs.purge", "cancelled"),
    ]
    assert all(e["detail"].startswith(f"state {e['target']}, finished before ") for e in audit)


def _purge_on_a_terminal(target: str, answer: bytes) -> subprocess.CompletedProcess[str]:
    """``runwick purge`` without --yes, its stdin a terminal on which ``answer`` is typed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_")}
    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            runwick_command("purge", "--state", "cancelled", "--older-than", "1h", "--target", target),
            cwd=ROOT,
            env=env,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.close(terminal)
        terminal = -1
        os.write(controller, answer)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


async def test_purge_asks_first_on_a_terminal_and_refuses_without_one(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    target = ("--target", coordinator.target)
    old = await _cancelled(client, 2)
    await coordinator.jump(2 * HOUR_MS)

    unasked = await runwick("purge", "--state", "cancelled", "--older-than", "1h", *target, check=False)
    assert unasked.returncode == 2
    assert (
        "pass --yes" in unasked.stderr and "cancelled jobs that finished more than 1h ago" in unasked.stderr
    )

    declined = await asyncio.to_thread(_purge_on_a_terminal, coordinator.target, b"n\n")
    assert declined.returncode == 1, declined.stderr
    assert "Purge cancelled jobs that finished more than 1h ago" in declined.stderr
    assert "[y/N]" in declined.stderr and "nothing done" in declined.stderr
    assert [await _exists(client, job_id) for job_id in old] == [True, True]

    confirmed = await asyncio.to_thread(_purge_on_a_terminal, coordinator.target, b"y\n")
    assert confirmed.returncode == 0, confirmed.stderr
    assert confirmed.stdout.strip() == "purged 2 cancelled job(s)"
    assert [await _exists(client, job_id) for job_id in old] == [False, False]


async def test_bad_purge_input_is_refused_naming_the_field_and_removes_nothing(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    target = ("--target", coordinator.target)
    await _cancelled(client, 2)
    await client.enqueue_raw("tests.retention", b"{}", queue="open")
    await coordinator.jump(2 * HOUR_MS)
    before = _counts(coordinator)

    for args, message in (
        (("--state", "running", "--older-than", "1h"), "invalid choice: 'running'"),
        (("--state", "failed", "--older-than", "soon"), "--older-than: 'soon' is not a duration"),
        (("--state", "failed", "--older-than=-1d"), "--older-than: '-1d' is negative"),
        (("--state", "failed", "--older-than", "30"), "'30' has no unit"),
    ):
        refused = await runwick("purge", *args, "--yes", *target, check=False)
        assert refused.returncode == 2, (args, refused.stderr)
        assert message in refused.stderr, (args, refused.stderr)

    with pytest.raises(ArgumentError) as not_terminal:
        await client.purge_jobs(JobState.RUNNING, timedelta(hours=1))
    assert [v.field for v in not_terminal.value.field_violations] == ["state"]
    assert "'running' is not a terminal state" in str(not_terminal.value)
    with pytest.raises(ArgumentError) as negative:
        await client.purge_jobs(JobState.CANCELLED, timedelta(seconds=-1))
    assert [v.field for v in negative.value.field_violations] == ["older_than"]
    assert "-1000 ms" in str(negative.value)

    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        stub = admin_service_pb2_grpc.AdminServiceStub(channel)
        for request, field, quoted in (
            (admin_service_pb2.PurgeJobsRequest(state=99, older_than=Duration(seconds=1)), "state", "99"),  # type: ignore[arg-type]
            (admin_service_pb2.PurgeJobsRequest(older_than=Duration(seconds=1)), "state", "required"),
            (admin_service_pb2.PurgeJobsRequest(state=job_pb2.JOB_STATE_CANCELLED), "older_than", "required"),
            (
                admin_service_pb2.PurgeJobsRequest(
                    state=job_pb2.JOB_STATE_CANCELLED, older_than=Duration(seconds=1, nanos=5)
                ),
                "older_than",
                "whole number of milliseconds",
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.PurgeJobs(request)
            assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert raised.value.details().startswith(f"{field}: ") and quoted in raised.value.details()

    assert _counts(coordinator) == before
    audit = await runwick("audit", "--action", "jobs.purge", "--json", *target)
    assert json.loads(audit.stdout) == {"events": [], "next_page_token": ""}


async def test_serve_purges_by_its_retention_flags(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    process = serve(
        log,
        *("--database-url", database_url),
        *("--insecure", "--port", "0", *NO_FIXED_PORTS),
        *("--retain-cancelled", "1s", "--retain-succeeded", "off", "--retention-interval", "200ms"),
        env={**os.environ, "RUNWICK_RETAIN_FAILED": "off"},
    )
    try:
        target = await wait_listening(process, log)
        async with AsyncClient(target) as client:
            [job_id] = await _cancelled(client, 1)
            assert await _exists(client, job_id)

            async def purged() -> bool:
                return not await _exists(client, job_id)

            await eventually_async(purged, timeout=20)
    finally:
        await stop(process)
