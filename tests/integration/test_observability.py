"""Metrics, health, connection age and structured logs against a real coordinator.

The real-Prometheus scrape is in ``test_prometheus.py``; these read the registries in
process, so they can check exact values after each step of the lifecycle.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2
from prometheus_client import CollectorRegistry

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from tests.support import eventually, health_status
from worker_sdk import AsyncClient, JobContext, JobNotFound, JobState, Worker, job
from worker_sdk._logging import JsonFormatter

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
ECHO = {"queue": "default", "wire_name": "tests.echo"}


def sample(running: RunningCoordinator, name: str, **labels: str) -> float:
    value = running.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_coordinator_metrics_follow_the_lifecycle(coordinator: Coordinator, client: AsyncClient):
    """Enqueues, waits, runs, lease expiries (started and not), stale results, workers and
    gRPC codes, each counted once where it happens."""
    running = coordinator.running
    fenced = await client.enqueue(Echo("fenced"))
    unstarted = await client.enqueue(Echo("never started"))
    with pytest.raises(JobNotFound):
        await client.get("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")
    assert sample(running, "runwick_jobs_enqueued_total", **ECHO) == 2
    # An error status goes out when the handler aborts, before the interceptor counts the
    # call on its way out: the client can hear NOT_FOUND a moment before it is counted.
    await eventually(
        lambda: (
            sample(
                running,
                "runwick_grpc_server_handled_total",
                grpc_method="runwick.v1.JobService/GetJob",
                grpc_code="NOT_FOUND",
            )
            == 1
        )
    )
    assert (
        sample(
            running, "runwick_grpc_server_handling_seconds_count", grpc_method="runwick.v1.JobService/Enqueue"
        )
        == 2
    )

    first = RawWorker(coordinator.target, "worker-a", ["tests.echo"], lease_ms=1_000)
    second = RawWorker(coordinator.target, "worker-b", ["tests.echo"], lease_ms=1_000)
    try:
        old = await first.claim()
        assert old.job_id == fenced
        assert (await first.start(old.attempt_id)).granted
        lapsing = await second.claim()  # claimed, never started
        assert lapsing.job_id == unstarted
        assert sample(running, "runwick_connected_workers", queue="default") == 2
        assert sample(running, "runwick_job_wait_seconds_count", **ECHO) == 1

        await coordinator.jump(1_001)  # both leases lapse: one started, one not
        assert sample(running, "runwick_leases_expired_total", **ECHO) == 2
        assert sample(running, "runwick_unstarted_abandonments_total", **ECHO) == 1
        assert sample(running, "runwick_jobs_completed_total", **ECHO, outcome="succeeded") == 0

        await coordinator.jump(10_000)  # past the retry delays
        new = await second.claim()  # either job: both are due again
        assert (await second.start(new.attempt_id)).granted
        late = await first.succeed(old.attempt_id, b"late")  # stale
        assert late.status == late.STATUS_STALE
        assert sample(running, "runwick_stale_results_total") == 1
        assert (await second.succeed(new.attempt_id, b"current")).status == late.STATUS_ACCEPTED
        assert sample(running, "runwick_jobs_completed_total", **ECHO, outcome="succeeded") == 1
        assert sample(running, "runwick_job_run_duration_seconds_count", **ECHO, outcome="succeeded") == 1
        assert sample(running, "runwick_job_wait_seconds_count", **ECHO) == 2
    finally:
        await first.close()
        await second.close()
    await eventually(lambda: sample(running, "runwick_connected_workers", queue="default") == 0)
    await eventually(
        lambda: (
            sum(
                metric.value
                for family in running.metrics.registry.collect()
                if family.name == "runwick_grpc_server_handled"
                for metric in family.samples
                if metric.name.endswith("_total") and metric.labels["grpc_method"].endswith("/Connect")
            )
            == 2
        )
    )
    assert sample(running, "runwick_store_transaction_seconds_count") > 0

    assert await running.check_database()  # the background read, run now
    # One job succeeded; the other waits, due again after the jumps (promoted to available).
    assert sample(running, "runwick_queue_depth", queue="default", state="available") == 1
    assert sample(running, "runwick_queue_depth", queue="default", state="scheduled") == 0
    assert sample(running, "runwick_queue_depth", queue="default", state="running") == 0
    assert sample(running, "runwick_database_up") == 1


async def test_a_cancel_outside_any_worker_batch_is_counted_as_completed(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    job_id = await client.enqueue(Echo("never runs"))
    labels = {**ECHO, "outcome": "cancelled"}
    before = sample(coordinator.running, "runwick_jobs_completed_total", **labels)

    await client.cancel(job_id)

    assert sample(coordinator.running, "runwick_jobs_completed_total", **labels) == before + 1


async def test_readiness_follows_the_database_and_draining_while_liveness_stays(database_url: str):
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=database_url, port=0, health_port=0, drain_timeout_s=10, health_check_interval_s=3600
        )
    )
    assert running.health_port is not None
    port = running.health_port
    try:
        for service in ("", "liveness", "readiness"):
            assert await health_status(port, service) == SERVING

        def unreachable(now_ms: int, cap: int) -> list[object]:
            raise OSError("connection refused")

        assert await running.check_database()  # also waits out the loop's first check
        reads = running.store.queue_stats
        running.store.queue_stats = unreachable  # type: ignore[method-assign,assignment]
        assert not await running.check_database()
        assert await health_status(port, "readiness") == NOT_SERVING
        assert await health_status(port, "liveness") == SERVING
        assert await health_status(port, "") == SERVING  # the probe port's default is liveness
        assert running.metrics.registry.get_sample_value("runwick_database_up") == 0
        running.store.queue_stats = reads  # type: ignore[method-assign]
        assert await running.check_database()
        assert await health_status(port, "readiness") == SERVING

        worker = RawWorker(running.target, "draining-worker", ["tests.echo"])
        await worker.next("welcome")
        stopping = asyncio.create_task(running.stop())
        await worker.next("drain")
        assert await health_status(port, "readiness") == NOT_SERVING  # before the drain ends
        assert await health_status(port, "liveness") == SERVING
        assert not stopping.done()
        await worker.close()
        await asyncio.wait_for(stopping, 10)
    finally:
        await running.stop(grace_s=1)
    with pytest.raises(grpc.aio.AioRpcError):
        await health_status(port, "liveness")  # the health port closed with the rest


@job("tests.observe.tick")
@dataclass
class Tick:
    n: int


@job("tests.observe.noisy", max_executions=1)
@dataclass
class Noisy:
    fail: bool


@pytest.fixture
async def short_lived_connections(database_url: str) -> AsyncIterator[RunningCoordinator]:
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=database_url,
            port=0,
            drain_timeout_s=2,
            idle_recheck_interval_s=0.2,
            max_connection_age_ms=1_000,
            # The coordinator ends each stream itself at about the age; the transport's
            # cut after the grace is only a backstop, kept well clear of it so a loaded
            # machine does not turn a clean end into a cut.
            max_connection_age_grace_ms=5_000,
        )
    )
    yield running
    await running.stop(grace_s=1)


async def test_workers_reconnect_when_the_server_ends_connections_at_max_age(
    short_lived_connections: RunningCoordinator,
):
    """docs/scaling.md: the coordinator ends each worker stream cleanly at its maximum age (before
    the transport's connection age would cut it); the worker reconnects with backoff and
    carries on, and no job is lost, stranded or run twice."""
    running = short_lived_connections
    registry = CollectorRegistry()
    worker = Worker(
        running.target, concurrency=4, metrics_registry=registry, reconnect_max_delay=timedelta(seconds=1)
    )
    runs: list[int] = []

    @worker.handler(Tick)
    async def tick(payload: Tick, ctx: JobContext) -> None:
        await asyncio.sleep(0.05)
        runs.append(payload.n)

    async with AsyncClient(running.target) as client, worker:
        for n in range(30):  # spread over about three connection lifetimes
            await client.enqueue(Tick(n))
            await asyncio.sleep(0.1)
        await eventually(lambda: running.store.count_by_state() == {"succeeded": 30}, timeout=30)

    assert sorted(runs) == list(range(30))
    reconnects = registry.get_sample_value("runwick_worker_reconnects_total")
    assert reconnects is not None and reconnects >= 2
    tick_labels = {"queue": "default", "wire_name": "tests.observe.tick"}
    assert (
        registry.get_sample_value("runwick_worker_jobs_total", {**tick_labels, "outcome": "succeeded"}) == 30
    )
    assert registry.get_sample_value("runwick_worker_jobs_in_flight", tick_labels) == 0
    assert registry.get_sample_value("runwick_worker_connected_streams") == 0
    connects = {
        sample.labels["grpc_code"]: sample.value
        for family in running.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "runwick_grpc_server_handled_total"
        and sample.labels["grpc_method"] == "runwick.v1.WorkerService/Connect"
    }
    assert set(connects) == {"OK"} and connects["OK"] >= 3  # ended cleanly, never cut


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


async def test_json_logs_name_the_job_and_keep_error_text_below_info(
    coordinator: Coordinator, client: AsyncClient, json_log: io.StringIO
):
    """Lines a handler logs (async or on a thread) carry the job and attempt IDs; a
    failure's message appears at DEBUG at most (R-22)."""
    worker = Worker(coordinator.target, concurrency=2, metrics_registry=CollectorRegistry())
    app_log = logging.getLogger("tests.observe.app")

    @worker.handler(Noisy)
    def noisy(payload: Noisy, ctx: JobContext) -> None:  # a sync handler: runs on a thread
        app_log.info("handling noisy job")
        if payload.fail:
            raise ValueError("card 4111-1111 declined")

    async with worker:
        ok = await client.enqueue(Noisy(fail=False))
        failing = await client.enqueue(Noisy(fail=True))
        for job_id in (ok, failing):
            info = await client.wait(job_id, timedelta(seconds=20))
            assert info.state in (JobState.SUCCEEDED, JobState.FAILED)

    lines: list[dict[str, Any]] = [json.loads(line) for line in json_log.getvalue().splitlines()]
    handled = [line for line in lines if line["message"] == "handling noisy job"]
    assert {line["job_id"] for line in handled} == {ok, failing}
    assert all(line["attempt_id"] and line["wire_name"] == "tests.observe.noisy" for line in handled)
    loud = [line for line in lines if line["level"] in ("INFO", "WARNING", "ERROR", "CRITICAL")]
    assert loud and not [line for line in loud if "4111" in json.dumps(line)]


async def test_a_side_port_in_use_stops_the_start_cleanly(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for ports in ({"metrics_port": port}, {"health_port": port}):
            config = CoordinatorConfig(database_url=database_url, port=0, **ports)
            with pytest.raises(OSError, match=str(port)):
                await start_coordinator(config)
