"""``worker_sdk.testing.Coordinator``: whole job lifecycles in a unit test, on a virtual
clock, against the real coordinator (gRPC on port 0, a SQLite file) and the real worker.

The examples of issue 44: a job retried with backoff until it fails, a nightly schedule
in Berlin time, a lease that lapses after its worker vanished, a workflow; and the
SDK's own timers (execution timeout, heartbeats) moving with the clock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from worker_sdk import CallNext, JobContext, JobResult, JobState, Outcome, Retry, Worker, job
from worker_sdk.testing import AsyncCoordinator, Coordinator, NotIdle

MS = timedelta(milliseconds=1)


@job("tests.flaky_capture", max_executions=4)
@dataclass
class FlakyCapture:
    order_id: str


NIGHTLY = "tests.nightly_report"


@job(NIGHTLY)
@dataclass
class NightlyReport:
    kind: str = "daily"


@job("tests.slow_export", execution_timeout=timedelta(seconds=30))
@dataclass
class SlowExport:
    export_id: str


@job("tests.fetch_order")
@dataclass
class FetchOrder:
    order_id: str


@job("tests.send_receipt")
@dataclass
class SendReceipt:
    order_id: str


@pytest.fixture
def coordinator() -> object:
    with Coordinator() as started:
        yield started


def nominal_delay(settings_initial: timedelta, settings_max: timedelta, execution: int) -> timedelta:
    """R-2's nominal delay before the retry after ``execution`` (equal jitter halves it at most)."""
    return min(settings_initial * 2 ** (execution - 1), settings_max)


def test_retried_three_times_with_backoff_then_failed(coordinator: Coordinator) -> None:
    @coordinator.handler(FlakyCapture)
    def capture(payload: FlakyCapture, ctx: JobContext) -> None:
        raise ConnectionError(f"bank unreachable for {payload.order_id}")

    job_id = coordinator.client.enqueue(FlakyCapture("o-1"))
    coordinator.run_until_idle()
    settings = coordinator.job(job_id).settings
    for retry in range(1, settings.max_executions):
        attempts = coordinator.attempts(job_id)
        assert len(attempts) == retry and coordinator.job(job_id).state is JobState.SCHEDULED
        delay = attempts[-1].retry_delay
        assert delay is not None
        nominal = nominal_delay(settings.retry_initial_delay, settings.retry_max_delay, retry)
        assert nominal / 2 <= delay <= nominal

        coordinator.advance(delay - MS)  # not yet: the retry waits out its whole delay
        coordinator.run_until_idle()
        assert len(coordinator.attempts(job_id)) == retry

        coordinator.advance(MS)
        coordinator.run_until_idle()

    finished = coordinator.job(job_id)
    attempts = coordinator.attempts(job_id)
    assert finished.state is JobState.FAILED and finished.executions == settings.max_executions
    assert [a.outcome for a in attempts] == [Outcome.RETRYABLE_FAILURE] * settings.max_executions
    assert {a.error_code for a in attempts} == {"ConnectionError"}
    assert attempts[-1].retry_delay is None  # the last one was not retried
    for earlier, later in itertools.pairwise(attempts):
        assert earlier.finished_at is not None and earlier.retry_delay is not None
        assert later.started_at == earlier.finished_at + earlier.retry_delay


def test_one_long_advance_runs_every_retry_at_its_own_time(coordinator: Coordinator) -> None:
    @coordinator.handler(FlakyCapture)
    def capture(payload: FlakyCapture, ctx: JobContext) -> None:
        raise ConnectionError("bank unreachable")

    job_id = coordinator.client.enqueue(FlakyCapture("o-2"))
    enqueued_at = coordinator.now
    coordinator.advance(timedelta(hours=1))  # every retry comes due on the way
    attempts = coordinator.attempts(job_id)
    settings = coordinator.job(job_id).settings
    assert coordinator.job(job_id).state is JobState.FAILED and len(attempts) == settings.max_executions
    assert attempts[0].started_at == enqueued_at
    for run in attempts:  # virtual time stands still while a handler runs
        assert run.started_at == run.finished_at
    for earlier, later in itertools.pairwise(attempts):
        assert earlier.finished_at is not None and earlier.retry_delay is not None
        assert later.started_at == earlier.finished_at + earlier.retry_delay


@pytest.mark.parametrize(
    "start",
    [datetime(2026, 1, 14, 12, tzinfo=UTC), datetime(2026, 7, 14, 12, tzinfo=UTC)],
    ids=["winter", "summer"],
)
def test_the_nightly_schedule_enqueues_at_0230_berlin_time(start: datetime) -> None:
    berlin = ZoneInfo("Europe/Berlin")
    tomorrow = (start.astimezone(berlin) + timedelta(days=1)).date()
    tick = datetime.combine(tomorrow, time(2, 30), tzinfo=berlin).astimezone(UTC)
    with Coordinator(start=start) as coordinator:
        ran: list[str] = []

        @coordinator.handler(NightlyReport)
        def report(payload: NightlyReport, ctx: JobContext) -> None:
            ran.append(ctx.job_id)

        coordinator.client.create_schedule(
            "nightly", cron="30 2 * * *", timezone="Europe/Berlin", wire_name=NIGHTLY
        )
        coordinator.advance(tick - start - MS)  # across midnight: 02:30 has not come yet
        coordinator.run_until_idle()
        assert coordinator.jobs(wire_name=NIGHTLY) == [] and ran == []

        coordinator.advance(MS)
        coordinator.run_until_idle()
        [enqueued] = coordinator.jobs(wire_name=NIGHTLY)
        assert enqueued.created_at == tick and enqueued.run_at == tick
        assert ran == [enqueued.id] and coordinator.job(enqueued.id).state is JobState.SUCCEEDED

        coordinator.advance(timedelta(days=1) - MS)  # the next night's tick is a day away
        assert [j.id for j in coordinator.jobs(wire_name=NIGHTLY)] == [enqueued.id]

    # 01:30 UTC in winter (CET, UTC+1), 00:30 UTC in summer (CEST, UTC+2).
    utc_offset = berlin.utcoffset(tick.astimezone(berlin).replace(tzinfo=None))
    assert utc_offset is not None and tick.hour == 2 - utc_offset // timedelta(hours=1)
    assert tick.minute == 30


def test_a_lease_lapse_recovers_the_job_whose_worker_vanished() -> None:
    with Coordinator() as coordinator:

        @coordinator.handler(FetchOrder)
        async def fetch(payload: FetchOrder, ctx: JobContext) -> bytes:
            if ctx.execution_number == 1:
                await ctx.wait_cancelled()  # the first worker dies in here
            return payload.order_id.encode()

        job_id = coordinator.client.enqueue(FetchOrder("o-3"))
        coordinator.advance(timedelta(0))  # hands the job out; its handler blocks
        running = coordinator.job(job_id)
        assert running.state is JobState.RUNNING and running.lease_expires_at is not None
        coordinator.crash_worker()

        coordinator.advance(running.lease_expires_at - coordinator.now - MS)
        assert coordinator.job(job_id).state is JobState.RUNNING
        assert [a.outcome for a in coordinator.attempts(job_id)] == [None]

        coordinator.advance(MS)  # the lease lapses: expiry ends the attempt
        [abandoned] = coordinator.attempts(job_id)
        assert abandoned.outcome is Outcome.ABANDONED and abandoned.finished_at == running.lease_expires_at
        recovered = coordinator.job(job_id)
        assert recovered.state in (JobState.SCHEDULED, JobState.AVAILABLE) and recovered.run_at is not None

        coordinator.advance(max(recovered.run_at - coordinator.now, timedelta(0)))
        coordinator.run_until_idle()  # a new worker takes it
        finished = coordinator.job(job_id)
        attempts = coordinator.attempts(job_id)
        assert finished.state is JobState.SUCCEEDED and finished.output == b"o-3"
        assert [a.outcome for a in attempts] == [Outcome.ABANDONED, Outcome.SUCCEEDED]
        assert attempts[0].worker_id != attempts[1].worker_id


def test_a_child_runs_after_its_parent_and_reads_its_output(coordinator: Coordinator) -> None:
    ran: list[str] = []

    @coordinator.handler(FetchOrder)
    def fetch(payload: FetchOrder, ctx: JobContext) -> bytes:
        ran.append(ctx.job_id)
        return json.dumps({"order": payload.order_id, "total": len(payload.order_id) * 10}).encode()

    @coordinator.handler(SendReceipt)
    def send(payload: SendReceipt, ctx: JobContext) -> bytes:
        ran.append(ctx.job_id)
        [order] = [json.loads(output) for output in ctx.parent_outputs.values()]
        return f"receipt for {order['order']}: {order['total']}".encode()

    parent_id = coordinator.client.enqueue(FetchOrder("o-12"))
    child_id = coordinator.client.enqueue(SendReceipt("o-12"), parents=[parent_id])
    assert coordinator.job(child_id).state is JobState.WAITING

    coordinator.run_until_idle()
    parent, child = coordinator.job(parent_id), coordinator.job(child_id)
    assert ran == [parent_id, child_id]
    assert parent.state is JobState.SUCCEEDED and child.state is JobState.SUCCEEDED
    assert parent.output is not None
    order = json.loads(parent.output)
    assert child.output == f"receipt for {order['order']}: {order['total']}".encode()
    [parent_run], [child_run] = coordinator.attempts(parent_id), coordinator.attempts(child_id)
    assert parent_run.finished_at is not None and child_run.started_at is not None
    assert parent_run.finished_at <= child_run.started_at


def test_the_workers_execution_timeout_fires_on_the_virtual_clock() -> None:
    with Coordinator() as coordinator:

        @coordinator.handler(SlowExport)
        async def export(payload: SlowExport, ctx: JobContext) -> None:
            await ctx.wait_cancelled()  # only the timeout ends it

        job_id = coordinator.client.enqueue(SlowExport("e-1"))
        coordinator.advance(timedelta(0))
        timeout = coordinator.job(job_id).settings.execution_timeout
        assert timeout is not None

        coordinator.advance(timeout - MS)
        assert [a.outcome for a in coordinator.attempts(job_id)] == [None]

        coordinator.advance(MS)
        [timed_out] = coordinator.attempts(job_id)
        assert timed_out.outcome is Outcome.TIMED_OUT and timed_out.error_code == "timeout"
        assert timed_out.started_at is not None and timed_out.finished_at == timed_out.started_at + timeout


def test_heartbeats_keep_a_live_handlers_lease_while_time_moves() -> None:
    lease = timedelta(seconds=30)
    with Coordinator(lease=lease) as coordinator:

        @coordinator.handler(FetchOrder)
        async def fetch(payload: FetchOrder, ctx: JobContext) -> None:
            await ctx.wait_cancelled()  # runs until the test cancels it

        job_id = coordinator.client.enqueue(FetchOrder("o-5"))
        coordinator.advance(lease * 5)
        running = coordinator.job(job_id)
        assert running.state is JobState.RUNNING and running.lease_expires_at is not None
        assert running.lease_expires_at > coordinator.now
        assert [a.outcome for a in coordinator.attempts(job_id)] == [None]

        coordinator.client.cancel(job_id)  # pushed to the worker; the handler returns
        coordinator.run_until_idle()
        assert coordinator.job(job_id).state is JobState.CANCELLED
        assert [a.outcome for a in coordinator.attempts(job_id)] == [Outcome.CANCELLED]


def test_a_handler_blocked_on_the_test_is_left_running_after_blocked_after() -> None:
    go_on = threading.Event()
    with Coordinator(blocked_after=timedelta(milliseconds=50)) as coordinator:

        @coordinator.handler(SendReceipt)
        def send(payload: SendReceipt, ctx: JobContext) -> bytes:
            go_on.wait(timeout=30)  # until the test says so
            return b"sent"

        job_id = coordinator.client.enqueue(SendReceipt("o-8"))
        coordinator.advance(timedelta(minutes=1))  # moves on while the handler waits
        assert coordinator.job(job_id).state is JobState.RUNNING
        go_on.set()
        coordinator.run_until_idle()
        finished = coordinator.job(job_id)
        assert finished.state is JobState.SUCCEEDED and finished.output == b"sent"
        [run] = coordinator.attempts(job_id)
        assert run.started_at is not None and run.finished_at == run.started_at + timedelta(minutes=1)


@pytest.mark.parametrize(
    ("delta", "error", "message"),
    [
        (timedelta(seconds=-1), ValueError, "does not go back"),
        (timedelta(days=367), ValueError, "at most 366 days"),
        (timedelta(microseconds=500), ValueError, "whole milliseconds"),
        (5, TypeError, "takes a timedelta"),
    ],
)
def test_a_bad_advance_is_refused_and_moves_nothing(
    coordinator: Coordinator, delta: object, error: type[Exception], message: str
) -> None:
    before = coordinator.now
    with pytest.raises(error, match=message):
        coordinator.advance(delta)  # type: ignore[arg-type]
    assert coordinator.now == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"start": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"concurrency": 0}, "concurrency must be an int >= 1"),
        ({"lease": timedelta(0)}, "lease must be a positive timedelta"),
        ({"queues": ()}, "at least one non-empty queue name"),
        ({"idle_timeout": timedelta(0)}, "idle_timeout must be positive"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Coordinator(**arguments)  # type: ignore[arg-type]


def test_run_until_idle_that_never_goes_idle_names_what_is_still_running() -> None:
    with Coordinator() as coordinator:

        @coordinator.handler(FetchOrder)
        async def fetch(payload: FetchOrder, ctx: JobContext) -> None:
            await asyncio.Event().wait()  # waits for something the test never gives

        job_id = coordinator.client.enqueue(FetchOrder("o-9"))
        with pytest.raises(NotIdle) as stuck:
            coordinator.run_until_idle(within=timedelta(milliseconds=100))
        assert job_id in str(stuck.value) and "tests.fetch_order" in str(stuck.value)
        assert "0.1 s" in str(stuck.value)
        with pytest.raises(ValueError, match="within must be positive"):
            coordinator.run_until_idle(within=timedelta(0))
        with pytest.raises(RuntimeError, match="worker already started"):
            coordinator.handler(SendReceipt)


class RateLimited(Exception):
    pass


RATE_LIMIT_PAUSE = timedelta(seconds=30)
"""Under the jobs' maximum retry delay, which caps a middleware's Retry delay."""


class RateLimitRetry:
    """A rate limit is retried after exactly ``RATE_LIMIT_PAUSE``."""

    async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
        try:
            return await call_next()
        except RateLimited:
            return Retry("rate_limited", RATE_LIMIT_PAUSE)


def test_an_applications_worker_brings_its_handlers_middleware_and_output_limit(
    coordinator: Coordinator,
) -> None:
    app_worker = Worker("127.0.0.1:7233", max_output_bytes=8, middleware=[RateLimitRetry()])

    @app_worker.handler(FetchOrder)
    def fetch(payload: FetchOrder, ctx: JobContext) -> bytes:
        if ctx.execution_number == 1:
            raise RateLimited()
        return payload.order_id.encode()

    coordinator.include(app_worker)
    short, long = (
        coordinator.client.enqueue(FetchOrder("o-1")),
        coordinator.client.enqueue(FetchOrder("o-123456789")),
    )
    coordinator.run_until_idle()
    for job_id in (short, long):
        [limited] = coordinator.attempts(job_id)
        assert limited.error_code == "rate_limited" and limited.retry_delay == RATE_LIMIT_PAUSE
    coordinator.advance(RATE_LIMIT_PAUSE)
    coordinator.run_until_idle()
    assert coordinator.job(short).output == b"o-1"
    too_large = coordinator.job(long)
    assert too_large.state is JobState.FAILED and too_large.last_error_code == "output_too_large"


def test_a_type_without_job_or_a_second_handler_is_refused(coordinator: Coordinator) -> None:
    @dataclass
    class NotAJob:
        field: str

    with pytest.raises(Exception, match="@job"):
        coordinator.handler(NotAJob)

    @coordinator.handler(SendReceipt)
    def send(payload: SendReceipt, ctx: JobContext) -> None:
        pass

    with pytest.raises(ValueError, match=r"'tests\.send_receipt' already has a handler"):
        coordinator.handler(SendReceipt)
    app_worker = Worker("127.0.0.1:7233")
    app_worker.handler(SendReceipt)(send)
    with pytest.raises(ValueError, match="already has a handler"):
        coordinator.include(app_worker)
    coordinator.run_until_idle()  # nothing enqueued: idle at once


def test_the_fixture_gives_a_started_coordinator_and_its_client(
    runwick_coordinator: Coordinator, runwick_client: object
) -> None:
    assert runwick_client is runwick_coordinator.client

    @runwick_coordinator.handler(SendReceipt)
    def send(payload: SendReceipt, ctx: JobContext) -> bytes:
        return payload.order_id.encode()

    job_id = runwick_coordinator.client.enqueue(SendReceipt("o-21"))
    runwick_coordinator.run_until_idle()
    assert runwick_coordinator.job(job_id).output == b"o-21"


@pytest.mark.runwick_coordinator(start=datetime(2030, 5, 6, 7, 8, tzinfo=UTC))
def test_the_fixture_takes_arguments_from_its_marker(runwick_coordinator: Coordinator) -> None:
    assert runwick_coordinator.now == datetime(2030, 5, 6, 7, 8, tzinfo=UTC)


async def test_the_async_coordinator_runs_on_the_tests_loop() -> None:
    async with AsyncCoordinator() as coordinator:
        loops: list[asyncio.AbstractEventLoop] = []

        @coordinator.handler(FlakyCapture)
        async def capture(payload: FlakyCapture, ctx: JobContext) -> bytes:
            loops.append(asyncio.get_running_loop())
            if ctx.execution_number == 1:
                raise ConnectionError("bank unreachable")
            return b"captured"

        job_id = await coordinator.client.enqueue(FlakyCapture("o-30"))
        await coordinator.run_until_idle()
        [failed] = await coordinator.attempts(job_id)
        assert failed.retry_delay is not None
        await coordinator.advance(failed.retry_delay)
        await coordinator.run_until_idle()
        assert (await coordinator.job(job_id)).output == b"captured"
        assert [job.id for job in await coordinator.jobs(state=JobState.SUCCEEDED)] == [job_id]
        assert loops == [asyncio.get_running_loop()] * 2
