"""The Worker against a scripted WorkerService on a real grpc.aio server (R-1, R-7,
R-8, R-10, R-12, R-14 and the protocol in worker_service.proto)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from google.protobuf.duration_pb2 import Duration

import worker_sdk
from tests.support import read_log, reap, start_process, wait_exit
from worker_sdk import CallNext, JobContext, JobResult, Retry, Worker, job
from worker_sdk.proto.runwick.v1 import job_pb2, worker_service_pb2

if TYPE_CHECKING:
    from conftest import FakeCoordinator

MakeWorker = Callable[..., Worker]


@job("images.resize")
@dataclass
class Resize:
    path: str


def worker_with(make_worker: MakeWorker, handler: Callable[..., object], **options: object) -> Worker:
    worker = make_worker(**options)
    worker.handler(Resize)(handler)
    return worker


async def test_hello_credit_assignment_start_result_ack(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    seen: list[tuple[str, int, str]] = []

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        seen.append((ctx.attempt_id, ctx.execution_number, ctx.job_id))
        return b"resized " + job.path.encode()

    worker = worker_with(make_worker, resize, token="s3cret", queues=["images"], lease=timedelta(seconds=30))
    await worker.start()
    stream, hello = await coordinator.accept()
    assert stream.metadata["authorization"] == "Bearer s3cret"
    assert (await stream.next("credit")).count == 2
    assert worker.connected
    assert (hello.worker_id, list(hello.queues), list(hello.wire_names), hello.capacity) == (
        "w-test",
        ["images"],
        ["images.resize"],
        2,
    )
    assert hello.lease.ToTimedelta() == timedelta(seconds=30)

    stream.assign(Resize("a.png"), "att-1")
    assert (await stream.next("start")).attempt_id == "att-1"
    stream.grant("att-1", execution_number=2)
    result = await stream.next("result")
    assert (result.attempt_id, result.outcome, result.output) == (
        "att-1",
        job_pb2.OUTCOME_SUCCEEDED,
        b"resized a.png",
    )
    assert seen == [("att-1", 2, "job-att-1")]

    # The slot is free once its result is sent: its credit follows the result at once, so
    # the coordinator can claim the next job in the result's own transaction.
    assert (await stream.next("credit")).count == 1
    stream.ack("att-1")
    await stream.round_trip(Resize("marker.png"))  # a credit sent before it has arrived
    assert len(stream.kinds("credit")) == 2, "the ack frees nothing more: the credit went with the result"
    stream.refuse("att-marker")
    await stream.next("credit")


async def test_refused_start_drops_the_claim_and_gives_the_credit_back(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    called: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> None:
        called.append(ctx.attempt_id)

    await worker_with(make_worker, resize, concurrency=1).start()
    stream, _ = await coordinator.accept()
    assert (await stream.next("credit")).count == 1
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stream.refuse("att-1")
    assert (await stream.next("credit")).count == 1
    assert called == [] and stream.kinds("result") == []


async def test_exception_result_carries_code_type_and_detail(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    def resize(job: Resize, ctx: JobContext) -> None:
        raise FileNotFoundError(job.path)

    await worker_with(make_worker, resize).start()
    stream, _ = await coordinator.accept()
    stream.assign(Resize("gone.png"), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    result = await stream.next("result")
    assert result.outcome == job_pb2.OUTCOME_RETRYABLE_FAILURE
    assert (result.error_code, result.exception_type, result.message) == (
        "FileNotFoundError",
        "FileNotFoundError",
        "gone.png",
    )
    assert "Traceback" in result.detail
    assert not result.HasField("retry_delay")
    stream.ack("att-1")


async def test_heartbeats_name_runs_and_a_lost_attempt_is_cancelled_without_result(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    causes: list[str | None] = []

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        await ctx.wait_cancelled()
        causes.append(ctx.cancel_cause)
        return b"should not be sent"

    lease = timedelta(seconds=9)
    await worker_with(
        make_worker, resize, concurrency=1, lease=lease, heartbeat_interval=timedelta(milliseconds=30)
    ).start()
    stream, _ = await coordinator.accept()
    await stream.next("credit")
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    heartbeat = await stream.next("heartbeat")
    assert (list(heartbeat.attempt_ids), heartbeat.lease.ToTimedelta()) == (["att-1"], lease)

    coordinator.lost.add("att-1")
    assert (await stream.next("credit")).count == 1, "the slot is freed once the lost run stops"
    beats_before = len(stream.kinds("heartbeat"))
    assert causes == ["lost"]
    # A heartbeat round after the run ended: it names every attempt the worker still holds.
    await stream.round_trip(Resize("marker.png"))
    await stream.next_where("heartbeat", lambda hb: "att-marker" in hb.attempt_ids)
    assert stream.kinds("result") == []
    assert all("att-1" not in hb.attempt_ids for hb in stream.kinds("heartbeat")[beats_before:])
    stream.refuse("att-marker")
    await stream.next("credit")


async def test_coordinator_cancel_ends_the_run_cancelled(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    async def resize(job: Resize, ctx: JobContext) -> None:
        await ctx.wait_cancelled()
        ctx.raise_if_cancelled()

    await worker_with(make_worker, resize).start()
    stream, _ = await coordinator.accept()
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    await stream.next("heartbeat")
    stream.send(cancel=worker_service_pb2.Cancel(attempt_id="att-1", reason="user"))
    result = await stream.next("result")
    assert (result.outcome, result.error_code) == (job_pb2.OUTCOME_CANCELLED, "cancelled")
    stream.ack("att-1")


async def test_timeout_ignored_past_grace_sends_no_result_and_frees_the_slot(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    release = asyncio.Event()

    async def resize(job: Resize, ctx: JobContext) -> None:
        await release.wait()

    await worker_with(
        make_worker, resize, concurrency=1, heartbeat_interval=timedelta(milliseconds=30)
    ).start()
    stream, _ = await coordinator.accept()
    await stream.next("credit")
    stream.assign(Resize("a.png"), "att-1", execution_timeout=timedelta(milliseconds=50))
    await stream.next("start")
    stream.grant("att-1")
    assert (await stream.next("credit")).count == 1
    beats_before = len(stream.kinds("heartbeat"))
    # A heartbeat round while the abandoned handler still runs: it names every attempt
    # the worker still holds.
    await stream.round_trip(Resize("marker.png"))
    await stream.next_where("heartbeat", lambda hb: "att-marker" in hb.attempt_ids)
    release.set()
    assert stream.kinds("result") == []
    assert all("att-1" not in hb.attempt_ids for hb in stream.kinds("heartbeat")[beats_before:])
    stream.refuse("att-marker")
    await stream.next("credit")


async def test_unacknowledged_result_is_resent_after_the_stream_drops(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    async def resize(job: Resize, ctx: JobContext) -> bytes:
        return b"done"

    await worker_with(make_worker, resize, concurrency=1).start()
    first, _ = await coordinator.accept()
    await first.next("credit")
    first.assign(Resize("a.png"), "att-1")
    await first.next("start")
    first.grant("att-1")
    assert (await first.next("result")).output == b"done"
    first.drop()

    second, hello = await coordinator.accept()
    assert hello.worker_id == "w-test"
    resent = await second.next("result")
    assert (resent.attempt_id, resent.output) == ("att-1", b"done")
    # Credit dies with its stream: the new one gets the free slot again (a result that
    # awaits its ack holds none), after the resent result.
    assert (await second.next("credit")).count == 1
    second.ack("att-1")
    await second.round_trip(Resize("marker.png"))
    assert len(second.kinds("credit")) == 1, "the ack frees nothing more"
    second.refuse("att-marker")
    assert (await second.next("credit")).count == 1


async def test_results_awaiting_acks_beyond_the_capacity_hold_slots(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    """A coordinator that stops acknowledging stops getting work for the worker, before
    its unacknowledged outputs pile up: past ``capacity`` of them, each holds a slot."""

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        return job.path.encode()

    await worker_with(make_worker, resize, concurrency=1).start()
    stream, _ = await coordinator.accept()
    await stream.next("credit")
    for number in (1, 2):
        stream.assign(Resize(f"{number}.png"), f"att-{number}")
        await stream.next("start")
        stream.grant(f"att-{number}")
        assert (await stream.next("result")).attempt_id == f"att-{number}"
    await stream.round_trip(Resize("marker.png"))  # beyond the credit; the worker takes it
    stream.refuse("att-marker")
    await stream.round_trip(Resize("marker.png"), "att-marker-2")
    assert len(stream.kinds("credit")) == 2, "the first result freed its slot, the second did not"
    stream.refuse("att-marker-2")
    stream.ack("att-1")
    assert (await stream.next("credit")).count == 1


async def test_runs_keep_going_across_a_reconnect(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    release = asyncio.Event()

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        await release.wait()
        return b"survived"

    await worker_with(make_worker, resize, heartbeat_interval=timedelta(milliseconds=30)).start()
    first, _ = await coordinator.accept()
    first.assign(Resize("a.png"), "att-1")
    await first.next("start")
    first.grant("att-1")
    first.drop()

    second, _ = await coordinator.accept()
    assert (await second.next("credit")).count == 1, "one slot is still busy"
    assert list((await second.next("heartbeat")).attempt_ids) == ["att-1"]
    release.set()
    result = await second.next("result")
    assert (result.attempt_id, result.output) == ("att-1", b"survived")
    second.ack("att-1")


async def test_start_request_is_replayed_when_the_answer_was_lost(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    async def resize(job: Resize, ctx: JobContext) -> bytes:
        return b"ok"

    await worker_with(make_worker, resize).start()
    first, _ = await coordinator.accept()
    first.assign(Resize("a.png"), "att-1")
    await first.next("start")
    first.drop()

    second, _ = await coordinator.accept()
    assert (await second.next("start")).attempt_id == "att-1"
    second.grant("att-1")
    assert (await second.next("result")).output == b"ok"
    second.ack("att-1")


async def test_stop_drains_releases_unstarted_claims_and_interrupts_long_runs(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    causes: list[str | None] = []

    async def resize(job: Resize, ctx: JobContext) -> None:
        await ctx.wait_cancelled()
        causes.append(ctx.cancel_cause)

    worker = worker_with(make_worker, resize)
    await worker.start()
    stream, _ = await coordinator.accept()
    await stream.next("credit")
    stream.assign(Resize("long.png"), "att-run")
    stream.assign(Resize("waiting.png"), "att-reserved")
    await stream.next("start")
    await stream.next("start")
    stream.grant("att-run")
    await stream.next("heartbeat")

    stopping = asyncio.create_task(worker.stop())
    assert (await stream.next("release")).attempt_id == "att-reserved"
    stream.refuse("att-reserved", reason="released")
    stream.assign(Resize("late.png"), "att-late")
    assert (await stream.next("release")).attempt_id == "att-late", "claims arriving while draining go back"

    result = await stream.next("result")
    assert (result.attempt_id, result.outcome, result.error_code) == (
        "att-run",
        job_pb2.OUTCOME_INTERRUPTED,
        "worker_shutdown",
    )
    assert causes == ["shutdown"]
    stream.ack("att-run")
    await asyncio.wait_for(stopping, 2)
    await asyncio.wait_for(stream.closed.wait(), 2)
    assert len(stream.kinds("credit")) == 1, "no credit once draining"


async def test_drain_lets_short_runs_finish(coordinator: FakeCoordinator, make_worker: MakeWorker) -> None:
    release = asyncio.Event()

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        await release.wait()
        return b"finished"

    worker = worker_with(make_worker, resize, drain_timeout=timedelta(seconds=2))
    await worker.start()
    stream, _ = await coordinator.accept()
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    await stream.next("heartbeat")
    stopping = asyncio.create_task(worker.stop())
    await asyncio.sleep(0.05)
    release.set()
    result = await stream.next("result")
    assert (result.outcome, result.output) == (job_pb2.OUTCOME_SUCCEEDED, b"finished")
    stream.ack("att-1")
    await asyncio.wait_for(stopping, 2)


async def test_r12_granted_after_release_runs_within_the_drain_window(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    """The coordinator charged the execution before our Release arrived: with drain time
    left the run goes ahead like any running handler."""
    called: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        called.append(ctx.attempt_id)
        return b"ran"

    worker = worker_with(make_worker, resize, drain_timeout=timedelta(seconds=5))
    await worker.start()
    stream, _ = await coordinator.accept()
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stopping = asyncio.create_task(worker.stop())
    await stream.next("release")
    stream.grant("att-1")
    result = await stream.next("result")
    assert (result.outcome, result.output) == (job_pb2.OUTCOME_SUCCEEDED, b"ran")
    assert called == ["att-1"]
    stream.ack("att-1")
    await asyncio.wait_for(stopping, 5)


async def test_r12_granted_after_the_drain_window_reports_interrupted(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    called: list[str] = []

    async def resize(job: Resize, ctx: JobContext) -> None:
        called.append(ctx.attempt_id)

    worker = worker_with(make_worker, resize, drain_timeout=timedelta(milliseconds=1))
    await worker.start()
    stream, _ = await coordinator.accept()
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stopping = asyncio.create_task(worker.stop())
    await stream.next("release")
    await asyncio.sleep(0.05)  # the 1 ms drain window is over
    stream.grant("att-1")
    result = await stream.next("result")
    assert (result.outcome, result.error_code) == (job_pb2.OUTCOME_INTERRUPTED, "worker_shutdown")
    assert called == []
    stream.ack("att-1")
    await asyncio.wait_for(stopping, 5)


async def test_coordinator_drain_finishes_work_then_reconnects(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    release = asyncio.Event()

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        await release.wait()
        return b"ok"

    await worker_with(make_worker, resize, drain_timeout=timedelta(seconds=2)).start()
    first, _ = await coordinator.accept()
    await first.next("credit")
    first.assign(Resize("a.png"), "att-1")
    first.assign(Resize("b.png"), "att-2")
    await first.next("start")
    await first.next("start")
    first.grant("att-1")
    await first.next("heartbeat")
    first.send(drain=worker_service_pb2.Drain(deadline=Duration(seconds=5)))
    assert (await first.next("release")).attempt_id == "att-2"
    first.refuse("att-2", reason="released")
    release.set()
    assert (await first.next("result")).output == b"ok"
    first.ack("att-1")

    second, _ = await coordinator.accept()
    assert (await second.next("credit")).count == 2
    assert len(first.kinds("credit")) == 1, "no credit while draining"


async def test_async_with_starts_and_stops(coordinator: FakeCoordinator, make_worker: MakeWorker) -> None:
    async def resize(job: Resize, ctx: JobContext) -> None:
        return None

    async with worker_with(make_worker, resize):
        stream, _ = await coordinator.accept()
        await stream.next("credit")
    await asyncio.wait_for(stream.closed.wait(), 2)


def test_registration_rules(make_worker: MakeWorker) -> None:
    worker = make_worker()

    @worker.handler(Resize)
    def first(job: Resize, ctx: JobContext) -> None: ...

    with pytest.raises(ValueError, match="already has a handler"):
        worker.handler(Resize)
    with pytest.raises(ValueError, match="not a job type"):
        worker.handler(int)


async def test_start_needs_a_handler(make_worker: MakeWorker) -> None:
    with pytest.raises(RuntimeError, match="at least one handler"):
        await make_worker().start()


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"queues": []}, "queues"),
        ({"queues": "default"}, "not one str"),
        (
            {"lease": timedelta(seconds=1), "heartbeat_interval": timedelta(seconds=1)},
            "shorter than the lease",
        ),
        ({"lease": timedelta(microseconds=1500)}, "whole number of milliseconds"),
        ({"cancellation_grace": timedelta(seconds=-1)}, "cancellation_grace"),
    ],
)
def test_bad_worker_options(options: dict[str, object], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        Worker("127.0.0.1:1", **options)  # type: ignore[arg-type]


async def test_unanswered_heartbeat_restarts_the_stream(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    release = asyncio.Event()

    async def resize(job: Resize, ctx: JobContext) -> bytes:
        await release.wait()
        return b"ok"

    # Silence is judged after half a lease (at least one interval): 60 ms here.
    await worker_with(
        make_worker, resize, heartbeat_interval=timedelta(milliseconds=30), lease=timedelta(milliseconds=120)
    ).start()
    first, _ = await coordinator.accept()
    first.assign(Resize("a.png"), "att-1")
    await first.next("start")
    first.grant("att-1")
    coordinator.answer_heartbeats = False
    await first.next("heartbeat")

    second, _ = await coordinator.accept()
    coordinator.answer_heartbeats = True
    assert list((await second.next("heartbeat")).attempt_ids) == ["att-1"]
    release.set()
    assert (await second.next("result")).output == b"ok"
    second.ack("att-1")


async def test_middleware_retry_travels_as_retry_delay(
    coordinator: FakeCoordinator, make_worker: MakeWorker
) -> None:
    class Backoff:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            return Retry("rate_limited", timedelta(milliseconds=-1500))

    async def resize(job: Resize, ctx: JobContext) -> None:
        return None

    await worker_with(make_worker, resize, middleware=[Backoff()]).start()
    stream, _ = await coordinator.accept()
    stream.assign(Resize("a.png"), "att-1")
    await stream.next("start")
    stream.grant("att-1")
    result = await stream.next("result")
    assert (result.outcome, result.error_code) == (job_pb2.OUTCOME_RETRYABLE_FAILURE, "rate_limited")
    assert (result.retry_delay.seconds, result.retry_delay.nanos) == (-1, -500_000_000)
    stream.ack("att-1", stale=True)
    assert (await stream.next("credit")).count == 1, "a stale ack settles the result too"


WORKER_SCRIPT = """
import sys
from dataclasses import dataclass
from datetime import timedelta
import worker_sdk
from worker_sdk import CallNext, JobContext, JobResult, Retry, Worker, job

@job("images.resize")
@dataclass
class Resize:
    path: str

worker = Worker(
    sys.argv[1],
    worker_id="w-process",
    heartbeat_interval=timedelta(milliseconds=50),
    drain_timeout=timedelta(milliseconds=100),
    cancellation_grace=timedelta(milliseconds=100),
    ack_timeout=timedelta(seconds=2),
)

@worker.handler(Resize)
async def resize(job: Resize, ctx: JobContext) -> None:
    await ctx.wait_cancelled()

worker.run()
"""


async def test_run_drains_on_sigterm(coordinator: FakeCoordinator, tmp_path: Path) -> None:
    script, log = tmp_path / "worker_main.py", tmp_path / "worker_main.log"
    script.write_text(WORKER_SCRIPT)
    root = Path(worker_sdk.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    process = start_process([sys.executable, str(script), coordinator.target], log, env=env)
    try:
        stream, hello = await coordinator.accept()
        assert hello.worker_id == "w-process"
        stream.assign(Resize("a.png"), "att-1")
        await stream.next("start")
        stream.grant("att-1")
        await stream.next("heartbeat")
        process.send_signal(signal.SIGTERM)
        result = await stream.next("result")
        assert (result.outcome, result.error_code) == (job_pb2.OUTCOME_INTERRUPTED, "worker_shutdown")
        stream.ack("att-1")
        assert await wait_exit(process, 5) == 0, read_log(log)
    finally:
        reap(process)
