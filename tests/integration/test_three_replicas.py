"""Three coordinator processes on one PostgreSQL, a worker process on each, enqueues
through all three, and one replica killed with ``kill -9`` in the middle.

What must hold: every acknowledged enqueue ends ``succeeded``, each job with exactly one
successful attempt whose output is that attempt's own; no attempt's handler ran twice (a
start is granted once per attempt); the jobs the dead replica's worker held are
recovered by the other replicas' lease expiry and run there.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.app import open_scratch_store
from coordinator.domain.states import JobState, Outcome
from tests.chaos.jobs import Task, attempt_of_output
from tests.conftest import _truncate
from tests.support import eventually
from tests.support.processes import (
    NO_FIXED_PORTS,
    kill9,
    reap,
    runwick_command,
    serve,
    start_process,
    stop,
    wait_listening,
)
from worker_sdk import AsyncClient, EnqueueItem

REPLICAS = 3
JOBS_PER_ROUND = 30
ROUNDS = 6
KILL_AFTER_ROUND = 2
LEASE_MS = 1_500
CHAOS_WORKER_APP = "tests.chaos.worker_app:worker"

pytestmark = pytest.mark.postgres


@pytest.fixture
async def cluster(
    postgres_url: str, tmp_path: Path
) -> AsyncIterator[list[tuple[subprocess.Popen[str], str]]]:
    _truncate(postgres_url)
    coordinators: list[tuple[subprocess.Popen[str], str]] = []
    processes: list[subprocess.Popen[str]] = []
    try:
        for n in range(REPLICAS):
            log = tmp_path / f"coordinator-{n}.log"
            process = serve(
                log,
                *("--database-url", postgres_url, "--port", "0", "--insecure"),
                *("--maintenance-interval", "0.2"),
                *NO_FIXED_PORTS,
            )
            processes.append(process)
            coordinators.append((process, await wait_listening(process, log)))
        yield coordinators
    finally:
        for process in processes:
            if process.poll() is None:
                await stop(process)
            reap(process)


def start_chaos_worker(target: str, name: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "RUNWICK_TARGET": target,
        "CHAOS_WORKER_ID": name,
        "CHAOS_HISTORY": str(tmp_path / f"events-{name}.jsonl"),
        "CHAOS_LEASE_MS": str(LEASE_MS),
        "CHAOS_CONCURRENCY": "8",
    }
    return start_process(runwick_command("worker", CHAOS_WORKER_APP), tmp_path / f"{name}.log", env=env)


async def test_jobs_enqueued_through_three_replicas_succeed_once_when_one_is_killed(
    cluster: list[tuple[subprocess.Popen[str], str]], postgres_url: str, tmp_path: Path
) -> None:
    workers = [
        start_chaos_worker(target, f"replica-{n}-worker", tmp_path) for n, (_, target) in enumerate(cluster)
    ]
    acknowledged: list[str] = []
    alive = list(range(REPLICAS))
    try:
        for round_number in range(ROUNDS):
            for replica in alive:
                async with AsyncClient(cluster[replica][1]) as client:
                    keys = [f"r{round_number}-c{replica}-{n}" for n in range(JOBS_PER_ROUND // len(alive))]
                    items = [EnqueueItem(Task(key, 20), idempotency_key=key) for key in keys]
                    acknowledged += await client.enqueue_many(items)
            await asyncio.sleep(0.3)
            if round_number == KILL_AFTER_ROUND:
                # Slow jobs, so that the replica dies while its worker runs some of them.
                async with AsyncClient(cluster[0][1]) as client:
                    keys = [f"slow-{n}" for n in range(24)]
                    slow = await client.enqueue_many(
                        [EnqueueItem(Task(key, 800), idempotency_key=key) for key in keys]
                    )
                acknowledged += slow
                await eventually(
                    functools.partial(_started_by, tmp_path, "replica-1-worker", set(slow)),
                    timeout=30,
                    what="a slow job on replica 1",
                )
                await kill9(cluster[1][0])
                alive.remove(1)

        store = open_scratch_store(postgres_url)
        try:

            def all_succeeded() -> bool:
                jobs = store.get_jobs(acknowledged)
                return len(jobs) == len(set(acknowledged)) and all(
                    job.state is JobState.SUCCEEDED for job in jobs.values()
                )

            await eventually(
                all_succeeded, timeout=120, interval=0.5, what="every acknowledged job to succeed"
            )
            jobs = store.get_jobs(acknowledged)
            attempts = {job_id: store.list_attempts(job_id) for job_id in jobs}
        finally:
            store.close()
    finally:
        for worker in workers:
            reap(worker)

    starts = [event for event in _events(tmp_path) if event["kind"] == "start"]
    runs_per_attempt = Counter(event["attempt"] for event in starts)
    assert [a for a, runs in runs_per_attempt.items() if runs > 1] == []  # no start granted twice
    for job_id, job in jobs.items():
        succeeded = [a for a in attempts[job_id] if a.outcome is Outcome.SUCCEEDED]
        assert len(succeeded) == 1, (job_id, attempts[job_id])
        assert attempt_of_output(job.output) == succeeded[0].id
        assert succeeded[0].id in runs_per_attempt  # a handler really ran it
    lapsed = [
        a for job_attempts in attempts.values() for a in job_attempts if a.outcome is not Outcome.SUCCEEDED
    ]
    # The runs the dead replica's worker had were recovered and ran elsewhere.
    assert "replica-1-worker" in {a.worker_id for a in lapsed}


def _started_by(tmp_path: Path, worker_id: str, job_ids: set[str]) -> bool:
    return any(
        event["kind"] == "start" and event["worker_id"] == worker_id and event["job"] in job_ids
        for event in _events(tmp_path)
    )


def _events(tmp_path: Path) -> list[dict[str, object]]:
    events = []
    for path in tmp_path.glob("events-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill
    return events
