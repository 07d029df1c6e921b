"""docs/limits.md over real gRPC: every wrong input gets a status with machine-readable details
(``google.rpc.ErrorInfo`` reason, ``google.rpc.BadRequest`` field violations), the SDK
turns it into a typed exception a person can act on, message-size limits agree with the
bounds, and the worker stream answers out-of-order or malformed messages clearly."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import StoreBounds
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.conftest import Coordinator
from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from worker_sdk import (
    ArgumentError,
    AsyncClient,
    FailedPrecondition,
    FieldViolation,
    JobContext,
    JobNotFound,
    JobState,
    MessageTooLarge,
    PayloadTooLarge,
    RunwickError,
    Worker,
    job,
)
from worker_sdk._errors import translate_rpc_error, translated_rpc_errors
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

UNKNOWN_ID = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
WIRE = "tests.bounds.blob"


@pytest.fixture
async def small(database_url: str) -> AsyncIterator[RunningCoordinator]:
    """A coordinator with small bounds, so boundary sizes stay cheap."""
    bounds = StoreBounds(max_payload_bytes=100, max_output_bytes=50, max_enqueue_batch=5, max_page_size=3)
    running = await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, bounds=bounds, maintenance_interval_s=3600)
    )
    yield running
    await running.stop(grace_s=1)


async def _raw(target: str, call: Callable[[Any], Awaitable[Any]]) -> Any:
    """Calls the JobService stub directly (past the SDK's own checks); SDK errors out."""
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", -1)]) as channel:
        with translated_rpc_errors():
            return await call(job_service_pb2_grpc.JobServiceStub(channel))


def _enqueue(*jobs: job_service_pb2.NewJob) -> Callable[[Any], Awaitable[Any]]:
    return lambda stub: stub.Enqueue(job_service_pb2.EnqueueRequest(jobs=list(jobs)))


# -- the SDK's typed exceptions -----------------------------------------------------------


async def test_s5_oversized_payload_raises_payload_too_large_with_details(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    with pytest.raises(PayloadTooLarge) as caught:
        await client.enqueue(Echo("x" * 70_000))

    error = caught.value
    assert isinstance(error, ArgumentError) and isinstance(error, ValueError)
    assert error.status_code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == "PAYLOAD_TOO_LARGE"
    assert (error.wire_name, error.limit_bytes, error.index) == ("tests.echo", 65_536, 0)
    assert error.size_bytes is not None and error.size_bytes > 70_000
    [violation] = error.field_violations
    assert violation == FieldViolation("jobs[0].payload", violation.description)
    text = str(error)
    assert "tests.echo" in text and str(error.size_bytes) in text and "reference" in text
    assert coordinator.running.store.count_by_state() == {}


async def test_s5_a_batch_names_the_index_of_the_bad_job(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    with pytest.raises(PayloadTooLarge) as caught:
        await client.enqueue_many([Echo("fine"), Echo("fine"), Echo("x" * 70_000)])
    assert caught.value.index == 2
    assert caught.value.field_violations[0].field == "jobs[2].payload"
    assert coordinator.running.store.count_by_state() == {}


async def test_unknown_job_raises_job_not_found_with_its_reason(client: AsyncClient) -> None:
    with pytest.raises(JobNotFound) as caught:
        await client.get(UNKNOWN_ID)
    assert caught.value.reason == "JOB_NOT_FOUND"
    assert caught.value.metadata == {"job_id": UNKNOWN_ID}
    assert "does not exist" in str(caught.value)


@pytest.mark.parametrize(
    ("call", "field", "reason"),
    [
        (lambda s: s.GetJob(job_service_pb2.GetJobRequest(id="not-a-job")), "id", "INVALID_ID"),
        (lambda s: s.GetJob(job_service_pb2.GetJobRequest()), "id", "INVALID_ID"),
        (
            lambda s: s.ListAttempts(job_service_pb2.ListAttemptsRequest(job_id="x" * 10_000)),
            "job_id",
            "INVALID_ID",
        ),
        (lambda s: s.ListJobs(job_service_pb2.ListJobsRequest(state=99)), "state", "UNKNOWN_ENUM"),  # type: ignore[arg-type]
        (lambda s: s.ListJobs(job_service_pb2.ListJobsRequest(page_size=-1)), "page_size", "OUT_OF_RANGE"),
        (
            lambda s: s.ListJobs(job_service_pb2.ListJobsRequest(page_token="?")),
            "page_token",
            "PAGE_TOKEN_INVALID",
        ),
        (
            lambda s: s.WaitJob(job_service_pb2.WaitJobRequest(id=UNKNOWN_ID, timeout=Duration(nanos=1))),
            "timeout",
            "INVALID_DURATION",
        ),
        (
            lambda s: s.WaitJob(
                job_service_pb2.WaitJobRequest(id=UNKNOWN_ID, timeout=Duration(seconds=7200))
            ),
            "timeout",
            "INVALID_DURATION",
        ),
        (
            lambda s: s.WaitJob(
                job_service_pb2.WaitJobRequest(id=UNKNOWN_ID, timeout=Duration(seconds=1, nanos=-1))
            ),
            "timeout",
            "INVALID_DURATION",
        ),
        (
            _enqueue(job_service_pb2.NewJob(wire_name=WIRE, run_at=Timestamp(seconds=2**62))),
            "jobs[0].run_at",
            "INVALID_TIMESTAMP",
        ),
        (
            _enqueue(
                job_service_pb2.NewJob(
                    wire_name=WIRE,
                    settings=job_pb2.JobSettings(retry_initial_delay=Duration(nanos=1_500_000)),
                )
            ),
            "jobs[0].settings.retry_initial_delay",
            "INVALID_DURATION",
        ),
        (
            _enqueue(
                job_service_pb2.NewJob(wire_name=WIRE),
                job_service_pb2.NewJob(wire_name=WIRE, settings=job_pb2.JobSettings(max_executions=0)),
            ),
            "jobs[1].settings.max_executions",
            "SETTING_OUT_OF_RANGE",
        ),
        (
            _enqueue(
                job_service_pb2.NewJob(
                    wire_name=WIRE,
                    settings=job_pb2.JobSettings(
                        retry_initial_delay=Duration(seconds=9), retry_max_delay=Duration(seconds=1)
                    ),
                )
            ),
            "jobs[0].settings.retry_initial_delay",
            "SETTING_OUT_OF_RANGE",
        ),
        (_enqueue(job_service_pb2.NewJob(wire_name="a b")), "jobs[0].wire_name", "NAME_INVALID"),
        # Huge input quoted in an error must not overflow gRPC's trailing metadata.
        (_enqueue(job_service_pb2.NewJob(wire_name="é" * 500_000)), "jobs[0].wire_name", "NAME_TOO_LONG"),
        # Within GetJob's 64 KiB request limit (larger is RESOURCE_EXHAUSTED, tests/abuse).
        (lambda s: s.GetJob(job_service_pb2.GetJobRequest(id="\u00e9" * 32_000)), "id", "INVALID_ID"),
        (
            _enqueue(job_service_pb2.NewJob(wire_name=WIRE, parent_ids=["p"])),
            "jobs[0].parent_ids[0]",
            "INVALID_ID",
        ),
        (_enqueue(), "jobs", "FIELD_REQUIRED"),
    ],
)
async def test_bad_requests_get_invalid_argument_naming_field_and_reason(
    coordinator: Coordinator, call: Callable[[Any], Awaitable[Any]], field: str, reason: str
) -> None:
    with pytest.raises(ArgumentError) as caught:
        await _raw(coordinator.target, call)
    error = caught.value
    assert error.status_code is grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == reason
    assert [v.field for v in error.field_violations] == [field]
    assert str(error).startswith(f"{field}: ")
    assert coordinator.running.store.count_by_state() == {}


async def test_an_operation_in_the_wrong_state_gets_failed_precondition(client: AsyncClient) -> None:
    job_id = await client.enqueue(Echo("waiting"))
    with pytest.raises(FailedPrecondition) as caught:
        await client.retry(job_id)
    assert caught.value.reason == "WRONG_STATE"
    assert "only failed or cancelled jobs can be retried" in str(caught.value)


async def test_a_request_that_is_not_its_protobuf_message_gets_invalid_argument(
    coordinator: Coordinator,
) -> None:
    """Bytes that do not parse (a string field holding invalid UTF-8, a truncated varint)
    are INVALID_ARGUMENT with reason MALFORMED_MESSAGE, not gRPC's INTERNAL."""
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        for body in (b"\x0a\x02\xff\xfe", b"\x08\xff\xff", b"\xff"):
            call = channel.unary_unary("/runwick.v1.JobService/GetJob")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(body)
            error = translate_rpc_error(caught.value)
            assert (error.status_code, error.reason) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "MALFORMED_MESSAGE",
            )


# -- message sizes consistent with the bounds ---------------------------------------------


async def test_s5_a_full_batch_of_max_size_payloads_fits_the_transport(coordinator: Coordinator) -> None:
    """Default bounds: 500 jobs of 65,536 bytes (32 MiB) are accepted; the same batch with
    the last payload one byte over gets the bound's error, naming index 499."""
    bounds = coordinator.running.store.bounds
    jobs = [
        job_service_pb2.NewJob(wire_name=WIRE, payload=bytes([n % 251]) * bounds.max_payload_bytes)
        for n in range(bounds.max_enqueue_batch)
    ]
    over = list(jobs)
    over[-1] = job_service_pb2.NewJob(wire_name=WIRE, payload=b"o" * (bounds.max_payload_bytes + 1))

    with pytest.raises(PayloadTooLarge) as caught:
        await _raw(coordinator.target, _enqueue(*over))
    assert caught.value.index == bounds.max_enqueue_batch - 1
    assert coordinator.running.store.count_by_state() == {}

    response = await _raw(coordinator.target, _enqueue(*jobs))
    assert len(response.jobs) == bounds.max_enqueue_batch
    assert coordinator.running.store.count_by_state() == {"available": bounds.max_enqueue_batch}


async def test_s5_a_message_far_over_the_limit_gets_resource_exhausted(
    small: RunningCoordinator,
) -> None:
    limit = small.config.message_limit_bytes()
    with pytest.raises(MessageTooLarge) as caught:
        await _raw(small.target, _enqueue(job_service_pb2.NewJob(wire_name=WIRE, payload=b"x" * (limit + 1))))
    assert caught.value.status_code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "reference" in str(caught.value)
    async with AsyncClient(small.target) as client:  # and the coordinator serves on
        assert [info async for info in client.list_jobs()] == []


async def test_s5_configured_bounds_reach_the_api(small: RunningCoordinator) -> None:
    async with AsyncClient(small.target) as client:
        with pytest.raises(PayloadTooLarge) as caught:
            await client.enqueue(Echo("x" * 200))
        assert caught.value.limit_bytes == 100
        with pytest.raises(ArgumentError) as batch:
            await client.enqueue_many([Echo("a")] * 6)
        assert batch.value.reason == "BATCH_TOO_LARGE"
        await client.enqueue_many([Echo("a")] * 5)
    page = await _raw(
        small.target, lambda stub: stub.ListJobs(job_service_pb2.ListJobsRequest(page_size=100))
    )
    assert len(page.jobs) == 3 and page.next_page_token  # clamped to max_page_size
    assert small.store.count_by_state() == {"available": 5}


# -- the worker stream --------------------------------------------------------------------


async def _stream_error(worker: RawWorker) -> RunwickError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        while True:
            message = await asyncio.wait_for(worker.call.read(), 10)
            if message is grpc.aio.EOF:
                raise AssertionError("the stream ended with OK")
    await worker.close()
    return translate_rpc_error(caught.value)


@pytest.mark.parametrize(
    ("message", "status", "reason"),
    [
        (
            {"hello": pb.Hello(worker_id="again", capacity=1)},
            grpc.StatusCode.FAILED_PRECONDITION,
            "STREAM_OUT_OF_ORDER",
        ),
        ({"credit": pb.Credit(count=-1)}, grpc.StatusCode.INVALID_ARGUMENT, "OUT_OF_RANGE"),
        ({}, grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_MESSAGE"),
        (
            {"heartbeat": pb.Heartbeat(attempt_ids=[UNKNOWN_ID], lease=Duration(nanos=5))},
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_DURATION",
        ),
        (
            {"heartbeat": pb.Heartbeat(lease=Duration(seconds=90_000))},
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_DURATION",
        ),
        (
            {"heartbeat": pb.Heartbeat(attempt_ids=[UNKNOWN_ID] * 10_001)},
            grpc.StatusCode.INVALID_ARGUMENT,
            "OUT_OF_RANGE",
        ),
    ],
)
async def test_stream_messages_out_of_order_or_malformed_end_the_stream_clearly(
    coordinator: Coordinator, message: dict[str, Any], status: grpc.StatusCode, reason: str
) -> None:
    worker = RawWorker(coordinator.target, "rude-worker", [WIRE])
    await worker.next("welcome")
    worker.send(**message)

    error = await _stream_error(worker)

    assert (error.status_code, error.reason) == (status, reason)
    assert str(error)
    assert coordinator.connected_workers() == set()


@pytest.mark.parametrize(
    ("hello", "field", "reason"),
    [
        (pb.Hello(worker_id="", capacity=1), "hello.worker_id", "INVALID_ID"),
        (pb.Hello(worker_id="nul\x00", capacity=1), "hello.worker_id", "INVALID_ID"),
        (pb.Hello(worker_id="w", capacity=0), "hello.capacity", "OUT_OF_RANGE"),
        (pb.Hello(worker_id="w", capacity=1, queues=["a b"]), "hello.queues", "NAME_INVALID"),
        (pb.Hello(worker_id="w", capacity=1, wire_names=["x" * 129]), "hello.wire_names", "NAME_TOO_LONG"),
        (
            pb.Hello(worker_id="w", capacity=1, wire_names=[f"w{n}" for n in range(1_001)]),
            "hello.wire_names",
            "OUT_OF_RANGE",
        ),
        (pb.Hello(worker_id="w", capacity=1, lease=Duration(nanos=1)), "hello.lease", "INVALID_DURATION"),
        (pb.Hello(worker_id="w", capacity=1, host="h" * 257), "hello.host", "OUT_OF_RANGE"),
        (pb.Hello(worker_id="w", capacity=1, host="a\nb"), "hello.host", "OUT_OF_RANGE"),
        (pb.Hello(worker_id="w", capacity=1, sdk="s" * 129), "hello.sdk", "OUT_OF_RANGE"),
    ],
)
async def test_a_bad_hello_is_refused_naming_the_field(
    coordinator: Coordinator, hello: pb.Hello, field: str, reason: str
) -> None:
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

        call = worker_service_pb2_grpc.WorkerServiceStub(channel).Connect(
            iter([pb.ConnectRequest(hello=hello)])
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    error = translate_rpc_error(caught.value)
    assert isinstance(error, ArgumentError)
    assert (error.reason, [v.field for v in error.field_violations]) == (reason, [field])


async def test_a_stream_that_does_not_start_with_hello_gets_failed_precondition(
    coordinator: Coordinator,
) -> None:
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        from worker_sdk.proto.runwick.v1 import worker_service_pb2_grpc

        call = worker_service_pb2_grpc.WorkerServiceStub(channel).Connect(
            iter([pb.ConnectRequest(start=pb.StartRequest(attempt_id=UNKNOWN_ID))])
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
    error = translate_rpc_error(caught.value)
    assert isinstance(error, FailedPrecondition) and error.reason == "HELLO_REQUIRED"


async def test_messages_about_unknown_attempts_are_answered_and_the_stream_carries_on(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    """A start before any assignment is refused, a result for an attempt that does not
    exist is rejected, a heartbeat reports it lost; the stream stays usable."""
    worker = RawWorker(coordinator.target, "careful-worker", ["tests.echo"])
    await worker.next("welcome")

    start = await worker.start(UNKNOWN_ID)
    assert (start.granted, start.reason) == (False, "unknown attempt")
    worker.send(result=pb.Result(attempt_id=UNKNOWN_ID, outcome=job_pb2.OUTCOME_SUCCEEDED))
    ack = await worker.next("result_ack")
    assert isinstance(ack, pb.ResultAck)
    assert (ack.status, ack.reason) == (pb.ResultAck.STATUS_REJECTED, "ATTEMPT_NOT_FOUND")
    worker.send(result=pb.Result(attempt_id="garbage", outcome=job_pb2.OUTCOME_SUCCEEDED))
    ack = await worker.next("result_ack")
    assert (ack.status, ack.reason) == (pb.ResultAck.STATUS_REJECTED, "INVALID_ID")  # type: ignore[attr-defined]
    worker.send(heartbeat=pb.Heartbeat(attempt_ids=[UNKNOWN_ID, "garbage"]))
    beat = await worker.next("heartbeat_answer")
    assert set(beat.lost_attempt_ids) == {UNKNOWN_ID, "garbage"}  # type: ignore[attr-defined]
    worker.send(release=pb.Release(attempt_id=UNKNOWN_ID))
    worker.send(credit=pb.Credit(count=1_000_000))  # more than the capacity: clamped

    job_id = await client.enqueue(Echo("still works"))
    assignment = await worker.claim()
    assert assignment.job_id == job_id
    await worker.close()


async def test_a_result_with_an_outcome_a_worker_may_not_report_is_rejected(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    worker = RawWorker(coordinator.target, "confused-worker", ["tests.echo"])
    job_id = await client.enqueue(Echo("x"))
    assignment = await worker.claim()
    assert (await worker.start(assignment.attempt_id)).granted
    for outcome in (job_pb2.OUTCOME_ABANDONED, job_pb2.OUTCOME_UNSPECIFIED, 42):
        worker.send(result=pb.Result(attempt_id=assignment.attempt_id, outcome=outcome))  # type: ignore[arg-type]
        ack = await worker.next("result_ack")
        assert (ack.status, ack.reason) == (pb.ResultAck.STATUS_REJECTED, "UNKNOWN_ENUM")  # type: ignore[attr-defined]
    worker.send(
        result=pb.Result(
            attempt_id=assignment.attempt_id,
            outcome=job_pb2.OUTCOME_RETRYABLE_FAILURE,
            retry_delay=Duration(nanos=7),
        )
    )
    ack = await worker.next("result_ack")
    assert (ack.status, ack.reason) == (pb.ResultAck.STATUS_REJECTED, "INVALID_DURATION")  # type: ignore[attr-defined]
    assert (await client.get(job_id)).state is JobState.RUNNING
    await worker.close()


async def test_s5_output_over_the_bound_is_rejected_on_the_stream_and_changes_nothing(
    small: RunningCoordinator,
) -> None:
    async with AsyncClient(small.target) as client:
        job_id = await client.enqueue(Echo("x"))
        worker = RawWorker(small.target, "raw", ["tests.echo"])
        assignment = await worker.claim()
        assert (await worker.start(assignment.attempt_id)).granted
        before = (await client.get(job_id), await client.attempts(job_id))

        ack = await worker.succeed(assignment.attempt_id, output=b"o" * 51)

        assert ack.status == pb.ResultAck.STATUS_REJECTED
        assert ack.reason == "OUTPUT_TOO_LARGE"
        assert dict(ack.metadata) == {"job_id": job_id, "size_bytes": "51", "limit_bytes": "50"}
        assert "max_output_bytes" in ack.message
        assert (await client.get(job_id), await client.attempts(job_id)) == before
        ack = await worker.succeed(assignment.attempt_id, output=b"o" * 50)
        assert ack.status == pb.ResultAck.STATUS_ACCEPTED
        assert (await client.get(job_id)).output == b"o" * 50
        await worker.close()


@job("tests.bounds.big_output")
@dataclass
class BigOutput:
    size: int


async def test_s5_sdk_worker_records_output_too_large_when_the_coordinator_rejects_the_output(
    small: RunningCoordinator,
) -> None:
    """The worker allows 1 MB, the coordinator 50 bytes: the job fails permanently with
    ``output_too_large``, never retried, no output stored."""
    worker = Worker(small.target, concurrency=1, max_output_bytes=1_000_000)

    @worker.handler(BigOutput)
    async def produce(payload: BigOutput, ctx: JobContext) -> bytes:
        return b"z" * payload.size

    async with AsyncClient(small.target) as client, worker:
        job_id = await client.enqueue(BigOutput(51))
        info = await client.wait(job_id, timedelta(seconds=20))
        attempts = await client.attempts(job_id)
    assert info.state is JobState.FAILED
    assert (info.last_error_code, info.output) == ("output_too_large", None)
    assert [a.error_code for a in attempts] == ["output_too_large"]


def test_error_details_use_dataclass_violations() -> None:
    violation = FieldViolation("jobs[0].payload", "too big")
    assert dataclasses.astuple(violation) == ("jobs[0].payload", "too big")
