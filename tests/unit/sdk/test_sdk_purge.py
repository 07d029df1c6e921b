"""The clients' ``purge_jobs`` (R-19) against a fake AdminService: the request it sends,
the count it returns, and its errors."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc
import pytest

from worker_sdk import ArgumentError, AsyncClient, Client, ConnectionOptions, JobState, PermissionDenied
from worker_sdk.proto.runwick.v1 import admin_service_pb2, admin_service_pb2_grpc, job_pb2


@dataclass
class FakePurge(admin_service_pb2_grpc.AdminServiceServicer):
    requests: list[admin_service_pb2.PurgeJobsRequest] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)
    purged: int = 3
    fail_with: tuple[grpc.StatusCode, str] | None = None

    def PurgeJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if self.fail_with is not None:
            context.abort(*self.fail_with)
        return admin_service_pb2.PurgeJobsResponse(purged=self.purged)


@pytest.fixture
def fake() -> Iterator[tuple[FakePurge, str]]:
    servicer = FakePurge()
    server = grpc.server(ThreadPoolExecutor(2), options=[("grpc.so_reuseport", 0)])
    admin_service_pb2_grpc.add_AdminServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(0.1).wait()


def test_purge_jobs_sends_the_state_and_age_and_returns_the_count(fake: tuple[FakePurge, str]) -> None:
    servicer, target = fake
    with Client(ConnectionOptions(target, token="rwk_admin")) as client:
        assert client.purge_jobs(JobState.FAILED, timedelta(days=30)) == 3
        servicer.purged = 0
        assert client.purge_jobs("succeeded", timedelta(0)) == 0
    first, second = servicer.requests
    assert (first.state, first.older_than.seconds) == (job_pb2.JOB_STATE_FAILED, 30 * 86_400)
    assert (second.state, second.HasField("older_than")) == (job_pb2.JOB_STATE_SUCCEEDED, True)
    assert all(m["authorization"] == "Bearer rwk_admin" for m in servicer.metadata)


async def test_the_async_client_purges_too(fake: tuple[FakePurge, str]) -> None:
    servicer, target = fake
    async with AsyncClient(target) as client:
        assert await client.purge_jobs("cancelled", timedelta(hours=12)) == 3
    assert servicer.requests[0].state == job_pb2.JOB_STATE_CANCELLED
    assert servicer.requests[0].older_than.seconds == 12 * 3_600


def test_the_coordinator_judges_states_and_ages_the_sdk_can_encode(fake: tuple[FakePurge, str]) -> None:
    """A state that is not terminal and a negative age go to the coordinator, which
    refuses them (INVALID_ARGUMENT); only what cannot be encoded is refused here."""
    servicer, target = fake
    servicer.fail_with = (grpc.StatusCode.INVALID_ARGUMENT, "state: 'running' is not a terminal state")
    with Client(target) as client:
        with pytest.raises(ArgumentError, match="running"):
            client.purge_jobs(JobState.RUNNING, timedelta(days=1))
        assert servicer.requests[-1].state == job_pb2.JOB_STATE_RUNNING
        with pytest.raises(ArgumentError):
            client.purge_jobs(JobState.FAILED, timedelta(seconds=-1))
        assert servicer.requests[-1].older_than.seconds == -1
        sent = len(servicer.requests)
        with pytest.raises(ArgumentError, match="unknown job state 'finished'"):
            client.purge_jobs("finished", timedelta(days=1))
        with pytest.raises(ArgumentError, match="older_than must be a timedelta, got int"):
            client.purge_jobs(JobState.FAILED, 86_400)  # type: ignore[arg-type]
        servicer.fail_with = (grpc.StatusCode.PERMISSION_DENIED, "lacks the 'admin' scope")
        with pytest.raises(PermissionDenied):
            client.purge_jobs(JobState.FAILED, timedelta(days=1))
    assert len(servicer.requests) == sent + 1
