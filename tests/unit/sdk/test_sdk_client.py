"""``Client`` and ``AsyncClient`` against the fake JobService, and gRPC error translation."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from worker_sdk import (
    AlreadyExists,
    ArgumentError,
    AsyncClient,
    Client,
    CoordinatorError,
    CoordinatorUnavailable,
    EnqueueItem,
    FailedPrecondition,
    JobNotFound,
    JobSettings,
    JobState,
    MessageTooLarge,
    Outcome,
    PermissionDenied,
    RunwickError,
    Unauthenticated,
    job,
)
from worker_sdk._errors import translate_rpc_error
from worker_sdk.proto.runwick.v1 import job_pb2

if TYPE_CHECKING:
    from conftest import FakeJobService

JobServiceFixture = tuple["FakeJobService", str]
CREATED = datetime(2025, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)


@job("reports.build")
@dataclass
class BuildReport:
    name: str


def stored_job(job_id: str, state: int = job_pb2.JOB_STATE_SUCCEEDED, output: bytes = b"") -> job_pb2.Job:
    created = Timestamp()
    created.FromDatetime(CREATED)
    return job_pb2.Job(
        id=job_id,
        wire_name="reports.build",
        queue="default",
        payload=b'{"name":"q3"}',
        payload_version=1,
        state=state,
        settings=job_pb2.JobSettings(
            max_executions=5,
            retry_initial_delay=Duration(seconds=5),
            retry_max_delay=Duration(seconds=60),
            max_unstarted_abandonments=5,
            unstarted_initial_delay=Duration(seconds=1),
            unstarted_max_delay=Duration(seconds=30),
        ),
        executions=1,
        generation=1,
        created_at=created,
        output=output,
        parent_ids=["p-1"],
    )


async def test_async_enqueue_sends_token_and_the_new_job(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    run_at = datetime(2030, 1, 1, tzinfo=UTC)
    async with AsyncClient(target, token="t0ken") as client:
        job_id = await client.enqueue(
            BuildReport("q3"), run_at=run_at, parents=["p-1", "p-2"], idempotency_key="report-q3"
        )
    assert job_id == "job-0"
    assert fake.metadata[-1]["authorization"] == "Bearer t0ken"
    new_job = fake.requests[-1].jobs[0]
    assert (new_job.wire_name, new_job.queue, new_job.payload, new_job.payload_version) == (
        "reports.build",
        "default",
        b'{"name":"q3"}',
        1,
    )
    assert (list(new_job.parent_ids), new_job.idempotency_key) == (["p-1", "p-2"], "report-q3")
    assert new_job.run_at.ToDatetime(tzinfo=UTC) == run_at


def test_sync_enqueue_many_is_one_request(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    with Client(target) as client:
        ids = client.enqueue_many([BuildReport("a"), EnqueueItem(BuildReport("b"), priority=7)])
    assert ids == ["job-0", "job-1"]
    assert len(fake.requests) == 1 and "authorization" not in fake.metadata[0]
    assert [j.priority for j in fake.requests[0].jobs] == [0, 7]


def test_invalid_batch_names_the_index_and_sends_nothing(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    with (
        Client(target) as client,
        pytest.raises(ArgumentError, match="job 1: run_at must be a timezone-aware"),
    ):
        client.enqueue_many([BuildReport("a"), EnqueueItem(BuildReport("b"), run_at=datetime(2030, 1, 1))])
    assert fake.requests == []


@pytest.mark.parametrize(
    ("payload", "options", "message"),
    [
        ("not a job", {}, "str is not a job type"),
        (BuildReport("a"), {"parents": "p-1"}, "not one str"),
        (BuildReport("a"), {"idempotency_key": ""}, "idempotency_key"),
        (BuildReport("a"), {"priority": "high"}, "priority must be an int"),
    ],
)
def test_enqueue_argument_errors(
    job_service: JobServiceFixture, payload: object, options: dict, message: str
) -> None:
    with Client(job_service[1]) as client, pytest.raises(ArgumentError, match=message):
        client.enqueue(payload, **options)


async def test_get_decodes_the_job(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    fake.jobs["j-1"] = stored_job("j-1", output=b"report")
    async with AsyncClient(target) as client:
        info = await client.get("j-1")
    assert (info.id, info.state, info.terminal, info.output, info.parent_ids) == (
        "j-1",
        JobState.SUCCEEDED,
        True,
        b"report",
        ("p-1",),
    )
    assert info.created_at == CREATED and info.run_at is None and info.idempotency_key is None
    assert info.settings == JobSettings(max_executions=5)


def test_get_unknown_job_raises_job_not_found(job_service: JobServiceFixture) -> None:
    with Client(job_service[1]) as client, pytest.raises(JobNotFound, match="job nope not found") as caught:
        client.get("nope")
    assert caught.value.status_code is grpc.StatusCode.NOT_FOUND


async def test_wait_loops_until_terminal(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    fake.jobs["j-1"] = stored_job("j-1")
    fake.waits_before_terminal = 2
    async with AsyncClient(target) as client:
        info = await client.wait("j-1", timeout=timedelta(seconds=10))
    assert info.state is JobState.SUCCEEDED
    assert len(fake.requests) == 3
    assert all(r.timeout.ToTimedelta() <= timedelta(seconds=30) for r in fake.requests)


def test_wait_returns_the_job_as_it_is_when_time_runs_out(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    fake.jobs["j-1"] = stored_job("j-1")
    fake.waits_before_terminal = 100
    with Client(target) as client:
        info = client.wait("j-1", timeout=timedelta(0))
    assert (info.state, info.terminal, len(fake.requests)) == (JobState.RUNNING, False, 1)
    assert fake.requests[0].timeout == Duration(nanos=1_000_000)


async def test_list_jobs_follows_page_tokens(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    for n in range(5):
        fake.jobs[f"j-{n}"] = stored_job(f"j-{n}")
    async with AsyncClient(target) as client:
        ids = [info.id async for info in client.list_jobs(state=JobState.SUCCEEDED, queue="default")]
    assert ids == [f"j-{n}" for n in range(5)]
    assert [r.page_token for r in fake.requests] == ["", "2", "4"]
    assert fake.requests[0].state == job_pb2.JOB_STATE_SUCCEEDED and fake.requests[0].queue == "default"


def test_sync_list_jobs_and_unknown_state(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    fake.jobs["j-1"] = stored_job("j-1")
    with Client(target) as client:
        assert [info.id for info in client.list_jobs(state="succeeded")] == ["j-1"]
        with pytest.raises(ArgumentError, match="unknown job state"):
            list(client.list_jobs(state="finished"))


def test_attempts_decode_outcome_and_delay(job_service: JobServiceFixture) -> None:
    fake, target = job_service
    fake.attempts = [
        job_pb2.Attempt(
            id="a-1",
            job_id="j-1",
            generation=1,
            worker_id="w",
            execution_number=1,
            outcome=job_pb2.OUTCOME_RETRYABLE_FAILURE,
            error_code="KeyError",
            exception_type="KeyError",
            retry_delay=Duration(seconds=4),
        ),
        job_pb2.Attempt(id="a-2", job_id="j-1", generation=1, worker_id="w", execution_number=2),
    ]
    with Client(target) as client:
        first, second = client.attempts("j-1")
    assert (first.outcome, first.error_code, first.retry_delay) == (
        Outcome.RETRYABLE_FAILURE,
        "KeyError",
        timedelta(seconds=4),
    )
    assert (second.outcome, second.error_code, second.started_at) == (None, None, None)


STATUS_TO_ERROR = [
    (grpc.StatusCode.INVALID_ARGUMENT, ArgumentError),
    (grpc.StatusCode.NOT_FOUND, JobNotFound),
    (grpc.StatusCode.FAILED_PRECONDITION, FailedPrecondition),
    (grpc.StatusCode.ALREADY_EXISTS, AlreadyExists),
    (grpc.StatusCode.UNAUTHENTICATED, Unauthenticated),
    (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied),
    (grpc.StatusCode.UNAVAILABLE, CoordinatorUnavailable),
    (grpc.StatusCode.DEADLINE_EXCEEDED, CoordinatorUnavailable),
    (grpc.StatusCode.INTERNAL, CoordinatorError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, MessageTooLarge),  # a CoordinatorError
]


@pytest.mark.parametrize(("status", "error"), STATUS_TO_ERROR)
def test_sync_status_codes_become_sdk_errors(
    job_service: JobServiceFixture, status: grpc.StatusCode, error: type[RunwickError]
) -> None:
    fake, target = job_service
    fake.fail_with = (status, "the coordinator says why")
    with Client(target) as client, pytest.raises(error, match="the coordinator says why") as caught:
        client.enqueue(BuildReport("a"))
    assert caught.value.status_code is status
    assert isinstance(caught.value.__cause__, grpc.RpcError)


@pytest.mark.parametrize(("status", "error"), STATUS_TO_ERROR)
async def test_async_status_codes_become_sdk_errors(
    job_service: JobServiceFixture, status: grpc.StatusCode, error: type[RunwickError]
) -> None:
    fake, target = job_service
    fake.fail_with = (status, "the coordinator says why")
    async with AsyncClient(target) as client:
        with pytest.raises(error, match="the coordinator says why"):
            await client.attempts("j-1")


async def test_unreachable_coordinator_is_unavailable() -> None:
    async with AsyncClient("127.0.0.1:1", rpc_timeout=timedelta(seconds=2)) as client:
        with pytest.raises(CoordinatorUnavailable):
            await client.get("j-1")


def test_translation_of_an_error_without_status() -> None:
    class Bare(grpc.RpcError):
        pass

    error = translate_rpc_error(Bare())
    assert type(error) is CoordinatorError and error.status_code is grpc.StatusCode.UNKNOWN


def test_bad_token_is_rejected_early() -> None:
    with pytest.raises(ArgumentError, match="token"):
        Client("127.0.0.1:1", token="two\nlines")
