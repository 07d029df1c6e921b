"""The clients' admin calls (tokens, audit log) and ``enqueue_raw``, against fakes."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from worker_sdk import (
    ArgumentError,
    AsyncClient,
    AuditEvent,
    Client,
    ConnectionOptions,
    CreatedToken,
    EnqueuedJob,
    FailedPrecondition,
    JobState,
    PermissionDenied,
    TokenInfo,
)
from worker_sdk.proto.runwick.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
)

CREATED = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def stamp(moment: datetime) -> Timestamp:
    message = Timestamp()
    message.FromDatetime(moment)
    return message


@dataclass
class FakeAdmin(admin_service_pb2_grpc.AdminServiceServicer):
    """An AdminService that records requests and answers from canned data."""

    requests: list[Any] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)
    events: list[admin_service_pb2.AuditEvent] = field(default_factory=list)
    fail_with: tuple[grpc.StatusCode, str] | None = None
    page_size: int = 2

    def _record(self, request: Any, context: grpc.ServicerContext) -> None:
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        if self.fail_with is not None:
            context.abort(*self.fail_with)

    @staticmethod
    def token(token_id: str, name: str, *, revoked: bool = False) -> admin_service_pb2.Token:
        message = admin_service_pb2.Token(
            id=token_id, name=name, scopes=["read", "work"], queues=["billing"], created_at=stamp(CREATED)
        )
        if revoked:
            message.revoked_at.CopyFrom(stamp(CREATED))
            message.created_by = "a" * 16
        return message

    def CreateToken(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        return admin_service_pb2.CreateTokenResponse(
            token=self.token("f" * 16, request.name), secret="rwk_ffff_secret"
        )

    def ListTokens(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        tokens = [self.token("a" * 16, "ops")]
        if request.include_revoked:
            tokens.append(self.token("b" * 16, "old", revoked=True))
        return admin_service_pb2.ListTokensResponse(tokens=tokens)

    def RevokeToken(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        return admin_service_pb2.RevokeTokenResponse(token=self.token(request.id, "ops", revoked=True))

    def ListAuditEvents(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._record(request, context)
        start = int(request.page_token or 0)
        following = start + self.page_size
        return admin_service_pb2.ListAuditEventsResponse(
            events=self.events[start:following],
            next_page_token=str(following) if following < len(self.events) else "",
        )


@dataclass
class FakeEnqueue(job_service_pb2_grpc.JobServiceServicer):
    """A JobService whose Enqueue answers every job as an existing, running one."""

    requests: list[Any] = field(default_factory=list)

    def Enqueue(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        return job_service_pb2.EnqueueResponse(
            jobs=[job_service_pb2.EnqueuedJob(id="j-1", existing=True, state=job_pb2.JOB_STATE_RUNNING)]
        )


Fakes = tuple[FakeAdmin, FakeEnqueue, str]


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    admin, jobs = FakeAdmin(), FakeEnqueue()
    server = grpc.server(ThreadPoolExecutor(4), options=[("grpc.so_reuseport", 0)])
    admin_service_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    job_service_pb2_grpc.add_JobServiceServicer_to_server(jobs, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield admin, jobs, f"127.0.0.1:{port}"
    finally:
        server.stop(0.1).wait()


def events(count: int) -> list[admin_service_pb2.AuditEvent]:
    return [
        admin_service_pb2.AuditEvent(
            id=count - n,
            at=stamp(CREATED),
            actor_token_id="a" * 16 if n % 2 else "",
            actor_name="ops" if n % 2 else "coordinator",
            action="job.cancel",
            target=f"j-{n}",
            peer="ipv4:127.0.0.1:5000",
            detail="" if n % 2 else "state available",
        )
        for n in range(count)
    ]


def test_create_list_and_revoke_tokens(fakes: Fakes) -> None:
    admin, _, target = fakes
    with Client(ConnectionOptions(target, token="rwk_admin")) as client:
        created = client.create_token("billing", ["read", "work"], queues=["billing"])
        listed = client.list_tokens()
        everything = client.list_tokens(include_revoked=True)
        revoked = client.revoke_token("b" * 16)
    assert created == CreatedToken(
        token=TokenInfo("f" * 16, "billing", ("read", "work"), ("billing",), created_at=CREATED),
        secret="rwk_ffff_secret",
    )
    create = admin.requests[0]
    assert (create.name, list(create.scopes), list(create.queues)) == (
        "billing",
        ["read", "work"],
        ["billing"],
    )
    assert [t.name for t in listed] == ["ops"] and not listed[0].revoked
    assert [t.name for t in everything] == ["ops", "old"] and everything[1].revoked
    assert everything[1].created_by == "a" * 16 and listed[0].created_by is None
    assert revoked.id == "b" * 16 and revoked.revoked_at == CREATED
    assert all(m["authorization"] == "Bearer rwk_admin" for m in admin.metadata)


def test_audit_events_follow_page_tokens(fakes: Fakes) -> None:
    admin, _, target = fakes
    admin.events = events(5)
    with Client(target) as client:
        found = list(client.list_audit_events(action="job.cancel", target="j-1", page_size=2))
    assert [e.id for e in found] == [5, 4, 3, 2, 1]
    assert found[0] == AuditEvent(
        id=5,
        action="job.cancel",
        target="j-0",
        actor_name="coordinator",
        at=CREATED,
        peer="ipv4:127.0.0.1:5000",
        detail="state available",
    )
    assert found[1].actor_token_id == "a" * 16 and found[1].detail is None
    assert [r.page_token for r in admin.requests] == ["", "2", "4"]
    assert {(r.action, r.target, r.page_size) for r in admin.requests} == {("job.cancel", "j-1", 2)}


async def test_async_admin_calls(fakes: Fakes) -> None:
    admin, _, target = fakes
    admin.events = events(3)
    async with AsyncClient(target, token="rwk_admin") as client:
        created = await client.create_token("ops", ("manage",))
        tokens = await client.list_tokens(include_revoked=True)
        revoked = await client.revoke_token("a" * 16)
        found = [event.id async for event in client.list_audit_events()]
    assert created.secret == "rwk_ffff_secret" and [t.name for t in tokens] == ["ops", "old"]
    assert revoked.revoked and found == [3, 2, 1]


async def test_admin_failures_are_sdk_errors(fakes: Fakes) -> None:
    admin, _, target = fakes
    admin.fail_with = (grpc.StatusCode.PERMISSION_DENIED, "the token lacks the admin scope")
    with Client(target) as client, pytest.raises(PermissionDenied, match="admin scope"):
        client.list_tokens()
    admin.fail_with = (grpc.StatusCode.FAILED_PRECONDITION, "already revoked")
    async with AsyncClient(target) as client:
        with pytest.raises(FailedPrecondition, match="already revoked"):
            await client.revoke_token("a" * 16)


def test_admin_arguments_are_checked_before_sending(fakes: Fakes) -> None:
    admin, _, target = fakes
    with Client(target) as client:
        with pytest.raises(ArgumentError, match="not one str"):
            client.create_token("ops", "read")
        with pytest.raises(ArgumentError, match="token_id"):
            client.revoke_token("")
    assert admin.requests == []


def test_enqueue_raw_sends_the_job_as_given(fakes: Fakes) -> None:
    _, jobs, target = fakes
    run_at = datetime(2030, 1, 1, tzinfo=UTC)
    with Client(target) as client:
        client.job_defaults(retry_delay=(timedelta(seconds=2), timedelta(seconds=20)))
        enqueued = client.enqueue_raw(
            "has spaces",  # not checked here: the coordinator judges names and values
            b'{"n": 1}',
            payload_version=3,
            queue="late",
            priority=-2,
            run_at=run_at,
            idempotency_key="k-1",
            max_executions=0,
        )
        client.enqueue_raw("ok.name", b"{}")
    assert enqueued == EnqueuedJob(id="j-1", existing=True, state=JobState.RUNNING)
    sent, plain = (request.jobs[0] for request in jobs.requests)
    assert (sent.wire_name, sent.payload, sent.payload_version, sent.queue, sent.priority) == (
        "has spaces",
        b'{"n": 1}',
        3,
        "late",
        -2,
    )
    assert (sent.idempotency_key, sent.run_at.ToDatetime(tzinfo=UTC)) == ("k-1", run_at)
    assert sent.settings.HasField("max_executions") and sent.settings.max_executions == 0
    assert sent.settings.retry_initial_delay.ToTimedelta() == timedelta(seconds=2)  # client defaults apply
    assert (plain.queue, plain.payload_version, plain.priority, plain.idempotency_key) == (
        "default",
        1,
        0,
        "",
    )
    assert not plain.HasField("run_at") and not plain.settings.HasField("max_executions")


async def test_async_enqueue_raw_and_its_type_checks(fakes: Fakes) -> None:
    _, jobs, target = fakes
    async with AsyncClient(target) as client:
        assert (await client.enqueue_raw("ok.name", b"{}")).state is JobState.RUNNING
        with pytest.raises(ArgumentError, match="payload must be bytes"):
            await client.enqueue_raw("ok.name", "{}")  # type: ignore[arg-type]
        with pytest.raises(ArgumentError, match="priority must be an int"):
            await client.enqueue_raw("ok.name", b"{}", priority=True)
        with pytest.raises(ArgumentError, match="timezone-aware"):
            await client.enqueue_raw("ok.name", b"{}", run_at=datetime(2030, 1, 1))
    assert len(jobs.requests) == 1
