"""``runwick worker`` freezes what its start-up made (the SDK, gRPC, the user's module)
before it runs, so the collector's full collections under load do not walk it."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.integration.conftest import Coordinator
from tests.integration.worker_app import Echo
from worker_sdk import AsyncClient, JobState

WAIT = timedelta(seconds=30)


# The freeze is the worker process's own: which engine the coordinator has changes nothing.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_runwick_worker_freezes_its_start_up_heap_and_then_runs_jobs(
    coordinator: Coordinator, client: AsyncClient, spawn_worker
) -> None:
    worker = spawn_worker(coordinator.target)
    info = await client.wait(await client.enqueue(Echo("after the freeze")), WAIT)
    assert info.state is JobState.SUCCEEDED
    [frozen] = re.findall(r"start-up heap frozen: (\d+) objects", worker.log())
    assert int(frozen) > 10_000
