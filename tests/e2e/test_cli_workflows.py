"""``runwick jobs`` with dependencies (R-15): enqueue under a parent, see parents and
children, and retry a failed parent with its dependents."""

from __future__ import annotations

import asyncio
import json

import pytest

from coordinator.domain.lifecycle import Report
from coordinator.domain.records import WorkerIdentity
from coordinator.domain.states import Outcome
from coordinator.service.work import AttemptMessage, ClaimRequest, ResultReport, WorkBatch
from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator

pytestmark = pytest.mark.slow


def _fail_the_job_of(coordinator: Coordinator, queue: str) -> None:
    """Runs one job of ``queue`` to a permanent failure, as a worker would."""
    ops, worker = coordinator.running.app.ops, WorkerIdentity("cli-test")
    [claimed] = ops.process(
        WorkBatch(claims=[ClaimRequest("cli-test", (queue,), ("tests.step",), 1, 60_000)])
    ).claims[0]
    ops.process(WorkBatch(starts=[AttemptMessage(claimed.attempt_id, worker)]))
    report = Report(Outcome.PERMANENT_FAILURE, "broken")
    ops.process(WorkBatch(results=[ResultReport(claimed.attempt_id, report, sender=worker)]))


async def test_enqueue_under_a_parent_show_relatives_and_retry_with_dependents(
    coordinator: Coordinator,
) -> None:
    target = ("--target", coordinator.target)
    parent = json.loads(
        (
            await runwick(
                "jobs",
                "enqueue",
                "tests.step",
                "--queue",
                "p",
                "--payload",
                '{"name": "p"}',
                "--json",
                *target,
            )
        ).stdout
    )["enqueued"]["id"]
    child = json.loads(
        (
            await runwick(
                "jobs",
                "enqueue",
                "tests.step",
                "--parent",
                parent,
                "--payload",
                '{"name": "c"}',
                "--json",
                *target,
            )
        ).stdout
    )["enqueued"]
    assert child["state"] == "waiting"

    shown = (await runwick("jobs", "get", child["id"], *target)).stdout
    assert any(line.split() == ["parents", parent] for line in shown.splitlines())
    shown = (await runwick("jobs", "get", parent, *target)).stdout
    assert any(line.split() == ["children", child["id"]] for line in shown.splitlines())

    await asyncio.to_thread(_fail_the_job_of, coordinator, "p")
    failed = json.loads((await runwick("jobs", "get", child["id"], "--json", *target)).stdout)["job"]
    assert (failed["state"], failed["last_error_code"]) == ("failed", "parent_failed")

    await runwick("jobs", "retry", parent, "--include-dependents", *target)

    reopened = json.loads((await runwick("jobs", "get", child["id"], "--json", *target)).stdout)["job"]
    assert (reopened["state"], reopened["generation"]) == ("waiting", 2)


async def test_an_unknown_parent_is_refused_naming_it(coordinator: Coordinator) -> None:
    unknown = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
    refused = await runwick(
        "jobs", "enqueue", "tests.step", "--parent", unknown, "--target", coordinator.target, check=False
    )
    assert refused.returncode == 1
    assert "NOT_FOUND" in refused.stderr and unknown in refused.stderr
    assert coordinator.running.store.count_by_state() == {}


async def test_enqueue_with_a_unique_key_returns_the_unfinished_job(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    args = ("jobs", "enqueue", "tests.step", "--unique-key", "nightly", "--json", *target)
    first = json.loads((await runwick(*args)).stdout)["enqueued"]
    again = json.loads((await runwick(*args)).stdout)["enqueued"]
    assert (again["id"], again["existing"], first["existing"]) == (first["id"], True, False)
