"""Workflows over real worker processes (R-15, R-16): a diamond A -> B, A -> C, B+C -> D
where D reads B's and C's outputs; a permanently failing B fails D unrun, and retrying
B with its dependents lets the workflow finish."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import Coordinator
from tests.integration.worker_app import Step
from tests.support import WorkerProcess
from worker_sdk import AsyncClient, EnqueueItem, JobState, new_job_id

pytestmark = pytest.mark.slow


async def _diamond(client: AsyncClient, b_needs: str = "") -> dict[str, str]:
    ids = {name: new_job_id() for name in "abcd"}
    items = [
        EnqueueItem(Step("a"), job_id=ids["a"]),
        EnqueueItem(Step("b", fail_unless=b_needs), job_id=ids["b"], parents=[ids["a"]]),
        EnqueueItem(Step("c"), job_id=ids["c"], parents=[ids["a"]]),
        EnqueueItem(Step("d"), job_id=ids["d"], parents=[ids["b"], ids["c"]]),
    ]
    assert await client.enqueue_many(items) == [ids[name] for name in "abcd"]
    return ids


async def test_a_diamond_runs_in_order_and_the_last_step_reads_its_parents(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    spawn_worker(coordinator.target)
    spawn_worker(coordinator.target)
    ids = await _diamond(client)

    d = await client.wait(ids["d"], timeout=timedelta(seconds=30))

    assert (d.state, d.output) == (JobState.SUCCEEDED, b"d(b(a()),c(a()))")
    assert d.parent_ids == tuple(sorted((ids["b"], ids["c"])))
    a = await client.get(ids["a"])
    assert a.child_ids == tuple(sorted((ids["b"], ids["c"])))
    # Each step started only after its parents had finished.
    finished = {name: (await client.get(ids[name])).finished_at for name in "abcd"}
    started = {name: (await client.attempts(ids[name]))[0].started_at for name in "abcd"}
    assert all(value is not None for value in (*finished.values(), *started.values()))
    assert started["b"] >= finished["a"] and started["c"] >= finished["a"]  # type: ignore[operator]
    assert started["d"] >= max(finished["b"], finished["c"])  # type: ignore[type-var, operator]


async def test_a_failed_step_fails_its_dependents_and_a_retry_with_dependents_finishes(
    coordinator: Coordinator,
    client: AsyncClient,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    spawn_worker(coordinator.target)
    fixed = tmp_path / "fixed"
    ids = await _diamond(client, b_needs=str(fixed))

    d = await client.wait(ids["d"], timeout=timedelta(seconds=30))
    assert (d.state, d.last_error_code, d.executions) == (JobState.FAILED, "parent_failed", 0)
    assert await client.attempts(ids["d"]) == []
    assert (await client.get(ids["b"])).state is JobState.FAILED

    fixed.write_text("now it works")
    b = await client.retry(ids["b"], include_dependents=True)
    assert (b.state, b.generation) == (JobState.AVAILABLE, 2)

    d = await client.wait(ids["d"], timeout=timedelta(seconds=30))
    assert (d.state, d.generation, d.output) == (JobState.SUCCEEDED, 2, b"d(b(a()),c(a()))")


async def test_bad_workflows_get_clear_statuses_and_create_nothing(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    from worker_sdk import AlreadyExists, ArgumentError, JobNotFound

    unknown = new_job_id()
    with pytest.raises(JobNotFound) as missing:
        await client.enqueue(Step("x"), parents=[unknown])
    assert missing.value.reason == "PARENT_NOT_FOUND" and unknown in str(missing.value)

    first, second = new_job_id(), new_job_id()
    cycle = [
        EnqueueItem(Step("x"), job_id=first, parents=[second]),
        EnqueueItem(Step("y"), job_id=second, parents=[first]),
    ]
    with pytest.raises(ArgumentError) as cyclic:
        await client.enqueue_many(cycle)
    assert cyclic.value.reason == "DEPENDENCY_CYCLE" and "jobs[0] -> jobs[1] -> jobs[0]" in str(cyclic.value)

    taken = await client.enqueue(Step("taken"))
    with pytest.raises(AlreadyExists) as exists:
        await client.enqueue_many([EnqueueItem(Step("again"), job_id=taken)])
    assert exists.value.reason == "JOB_ID_TAKEN"

    assert coordinator.running.store.count_by_state() == {"available": 1}  # only "taken"


async def test_a_unique_key_returns_the_unfinished_job_over_the_api(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    first = await client.enqueue(Step("nightly"), unique_key="nightly-2026-12-01")
    again = await client.enqueue(Step("nightly, again"), unique_key="nightly-2026-12-01")
    assert again == first
    raw = client.enqueue_raw
    assert (await raw("tests.step", b'{"name": "x"}', unique_key="nightly-2026-12-01")).existing
