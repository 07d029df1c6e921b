"""The worker does not call a handler whose lease is over by its own clock (R-10).

A start granted after the claim's lease lapsed (the process was paused between its
StartRequest and reading the grant: SIGSTOP, a GC pause, a frozen VM) belongs to an
attempt the coordinator has recorded abandoned and may run elsewhere. The pause is
staged by moving the worker's lease clock forward, not by sleeping through a lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from prometheus_client import CollectorRegistry

from worker_sdk import JobContext, Worker, job
from worker_sdk.proto.runwick.v1 import job_pb2

if TYPE_CHECKING:
    from conftest import FakeCoordinator

MakeWorker = Callable[..., Worker]

LEASE = timedelta(seconds=60)
# No periodic heartbeat while a test runs: the only ones are those it asks for.
QUIET = {"lease": LEASE, "heartbeat_interval": timedelta(seconds=50)}


@job("images.resize")
@dataclass
class Resize:
    path: str


class PausableClock:
    """The monotonic clock plus a jump: ``pause(s)`` is a process stopped for s seconds."""

    def __init__(self) -> None:
        self.offset_s = 0.0
        self._after_next_read_s = 0.0

    def __call__(self) -> float:
        now = time.monotonic() + self.offset_s
        self.pause(self._after_next_read_s)
        self._after_next_read_s = 0.0
        return now

    def pause(self, seconds: float) -> None:
        self.offset_s += seconds

    def pause_after_next_read(self, seconds: float) -> None:
        """The pause comes right after whoever reads the clock next has read it."""
        self._after_next_read_s = seconds


def with_clock(worker: Worker) -> PausableClock:
    """Gives a started worker's lease tracking a clock the test can jump."""
    engine = worker._engine
    assert engine is not None, "start the worker first"
    clock = PausableClock()
    engine.table.clock = clock
    return clock


async def test_a_start_granted_after_the_lease_lapsed_does_not_run_the_handler(
    coordinator: FakeCoordinator, make_worker: MakeWorker, caplog: pytest.LogCaptureFixture
) -> None:
    called: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        called.append(ctx.attempt_id)
        return b"ok"

    registry = CollectorRegistry()
    worker = make_worker(concurrency=1, metrics_registry=registry, **QUIET)
    worker.handler(Resize)(resize)
    await worker.start()
    clock = with_clock(worker)
    stream, _ = await coordinator.accept()
    assert (await stream.next("credit")).count == 1

    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    clock.pause(LEASE.total_seconds() + 1)  # stopped past the lease before reading the grant
    with caplog.at_level(logging.WARNING, logger="worker_sdk"):
        stream.grant("att-1")
        # The slot comes back at once, without a result to wait an ack for.
        assert (await stream.next("credit")).count == 1
        await stream.round_trip(Resize("marker.png"))
    assert called == []
    assert stream.kinds("result") == [], "the coordinator already ended the attempt"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "att-1" in r.getMessage()]
    assert len(warnings) == 1 and "lease" in warnings[0].getMessage()
    labels = {"queue": "default", "wire_name": "images.resize"}
    assert registry.get_sample_value("runwick_worker_lease_lapsed_starts_total", labels) == 1
    assert registry.get_sample_value("runwick_worker_jobs_total", {**labels, "outcome": "succeeded"}) is None

    # The worker carries on: the next claim, received after the pause, runs.
    stream.refuse("att-marker")
    await stream.next("credit")
    stream.assign(Resize("b.png"), "att-2")
    await stream.next_where("start", lambda start: start.attempt_id == "att-2")
    stream.grant("att-2")
    result = await stream.next("result")
    assert (result.attempt_id, result.outcome) == ("att-2", job_pb2.OUTCOME_SUCCEEDED)
    assert called == ["att-2"]
    stream.ack("att-2")


async def test_a_pause_between_the_grant_and_the_handler_call_is_caught_too(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    """The grant was read in time, but the process stopped before the run began."""
    called: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        called.append(ctx.attempt_id)
        return b"ok"

    worker = make_worker(concurrency=1, **QUIET)
    worker.handler(Resize)(resize)
    await worker.start()
    clock = with_clock(worker)
    stream, _ = await coordinator.accept()
    await stream.next("credit")
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    # Quiet heartbeats: the next read of the clock is the check made on reading the grant.
    clock.pause_after_next_read(LEASE.total_seconds() + 1)
    stream.grant("att-1")
    assert (await stream.next("credit")).count == 1, "the slot is free again, no result to ack"
    await stream.round_trip(Resize("marker.png"))
    assert called == [] and stream.kinds("result") == []
    stream.refuse("att-marker")


async def test_answered_heartbeats_renew_the_lease_of_a_claim_awaiting_its_start(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    """The lease is measured from the last answered heartbeat (from when it was sent),
    not only from the assignment: a claim kept waiting for its start still runs."""
    called: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        called.append(ctx.attempt_id)
        return b"ok"

    worker = make_worker(concurrency=1, **QUIET)
    worker.handler(Resize)(resize)
    await worker.start()
    clock = with_clock(worker)
    engine = worker._engine
    assert engine is not None
    stream, _ = await coordinator.accept()
    await stream.next("credit")

    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    clock.pause(LEASE.total_seconds() * 0.8)
    engine.heartbeater.beat()
    assert list((await stream.next("heartbeat")).attempt_ids) == ["att-1"]  # the fake answers it
    clock.pause(LEASE.total_seconds() * 0.8)  # 1.6 leases after the assignment, 0.8 after the renewal
    stream.grant("att-1")
    result = await stream.next("result")
    assert (result.attempt_id, result.outcome) == ("att-1", job_pb2.OUTCOME_SUCCEEDED)
    assert called == ["att-1"]
    stream.ack("att-1")
