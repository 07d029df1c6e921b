"""Page tokens over real gRPC, on both engines: a token the coordinator did not issue is
INVALID_ARGUMENT naming ``page_token`` (``PAGE_TOKEN_INVALID``), never INTERNAL, and
the SDK pages by passing the tokens it is given back unchanged."""

from __future__ import annotations

import base64

import grpc
import pytest

from tests.integration.conftest import Coordinator
from worker_sdk import AsyncClient
from worker_sdk._errors import _rich_details
from worker_sdk.proto.runwick.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
)

OVER_SQLITE_INTEGER = "9223372036854775808"  # 2**63: reached SQLite and overflowed
SUPERSCRIPT_DIGIT = "³"  # str.isdigit says yes, int() says no
TOKENS = [
    SUPERSCRIPT_DIGIT,
    OVER_SQLITE_INTEGER,
    "-1",
    "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f",  # a raw job ID, what ListJobs used to hand out
    "AWEAAAAAAAAAAA",  # well-formed base64 of an audit position out of range (0)
    "nul\x00",
    "x" * 10_000,
]
"""A few of each kind; ``tests/contract/test_page_tokens.py`` goes through many more."""
LISTS = {
    "ListJobs": (job_service_pb2_grpc.JobServiceStub, job_service_pb2.ListJobsRequest),
    "ListAuditEvents": (admin_service_pb2_grpc.AdminServiceStub, admin_service_pb2.ListAuditEventsRequest),
}


async def _seed(client: AsyncClient) -> None:
    """Three jobs and three audit events: each list has several pages of one."""
    for n in range(3):
        await client.enqueue_raw("tests.paging", b"{}")
        await client.create_token(f"pager-{n}", ["read"])


@pytest.mark.parametrize("token", TOKENS, ids=range(len(TOKENS)))
@pytest.mark.parametrize("method", sorted(LISTS))
async def test_a_bad_page_token_is_invalid_argument_never_internal(
    coordinator: Coordinator, client: AsyncClient, method: str, token: str
) -> None:
    await _seed(client)
    stub_type, request_type = LISTS[method]

    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        call = getattr(stub_type(channel), method)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call(request_type(page_size=1, page_token=token), timeout=10)
        # What it refused changed nothing: the first page still reads the same.
        first = await call(request_type(page_size=1), timeout=10)

    error = failed.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
    reason, _, violations = _rich_details(error)
    assert reason == "PAGE_TOKEN_INVALID"
    assert [v.field for v in violations] == ["page_token"]
    assert "page_token" in (error.details() or "")
    assert first.next_page_token


async def test_the_sdk_pages_through_every_list_with_the_tokens_it_is_given(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    await _seed(client)

    paged_jobs = [job.id async for job in client.list_jobs(page_size=1)]
    whole_jobs = [job.id async for job in client.list_jobs(page_size=100)]
    paged_events = [event.id async for event in client.list_audit_events(page_size=1)]
    whole_events = [event.id async for event in client.list_audit_events(page_size=100)]

    assert paged_jobs == whole_jobs and len(whole_jobs) == 3
    assert paged_events == whole_events and len(whole_events) == 3
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        jobs = job_service_pb2_grpc.JobServiceStub(channel)
        page = await jobs.ListJobs(job_service_pb2.ListJobsRequest(page_size=1), timeout=10)
    token = page.next_page_token
    assert token and token != page.jobs[0].id  # opaque: not the job ID it continues after
    assert base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))  # URL-safe base64
