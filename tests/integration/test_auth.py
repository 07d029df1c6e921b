"""Authentication and scopes over real gRPC (R-20, R-21, R-22): every RPC against every
kind of credential, a worker token's queue restriction, open health and reflection,
revocation, bootstrap, and the loopback-only rule for turning auth off."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health_pb2

from coordinator.api.auth import METHOD_SCOPES, OPEN_SERVICES
from coordinator.config import ConfigError, CoordinatorConfig
from coordinator.domain.access import Scope
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.states import Outcome
from coordinator.process import RunningCoordinator, start_coordinator
from coordinator.service.work import AttemptMessage, ClaimRequest, ResultReport, WorkBatch
from tests.support import health_status
from worker_sdk.proto.runwick.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    queue_pb2,
    worker_service_pb2,
    worker_service_pb2_grpc,
)
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as wpb

SECRET_TEXT = "the card number 4111-1111-1111-1111 leaked into an exception"
CREDENTIALS = ["none", "malformed", "forged", "revoked", *(s.value for s in Scope)]


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[RunningCoordinator]:
    config = CoordinatorConfig(database_url=database_url, port=0, auth_enabled=True, drain_timeout_s=1)
    running = await start_coordinator(config)
    yield running
    await running.stop(grace_s=1)


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return () if token is None else (("authorization", f"Bearer {token}"),)


@dataclass
class Api:
    """Stubs over one channel, and helpers that act with the all-scope admin token."""

    channel: grpc.aio.Channel
    admin: str
    jobs: Any = field(init=False)
    workers: Any = field(init=False)
    tokens: Any = field(init=False)
    schedules_made: int = 0

    def __post_init__(self) -> None:
        self.jobs = job_service_pb2_grpc.JobServiceStub(self.channel)
        self.workers = worker_service_pb2_grpc.WorkerServiceStub(self.channel)
        self.tokens = admin_service_pb2_grpc.AdminServiceStub(self.channel)

    async def create_token(self, name: str, scopes: list[str], queues: list[str] = ()) -> tuple[str, str]:  # type: ignore[assignment]
        request = admin_service_pb2.CreateTokenRequest(name=name, scopes=scopes, queues=list(queues))
        response = await self.tokens.CreateToken(request, metadata=metadata(self.admin))
        return response.token.id, response.secret

    async def enqueue(self) -> str:
        job = job_service_pb2.NewJob(wire_name="tests.matrix", payload=b"{}")
        response = await self.jobs.Enqueue(
            job_service_pb2.EnqueueRequest(jobs=[job]), metadata=metadata(self.admin)
        )
        return str(response.jobs[0].id)

    async def schedule(self, *, paused: bool = False) -> str:
        """A new schedule's name (made with the all-scope admin token)."""
        self.schedules_made += 1
        name = f"matrix-{self.schedules_made}"
        request = admin_service_pb2.CreateScheduleRequest(
            name=name, cron="0 0 1 1 *", timezone="UTC", wire_name="tests.matrix"
        )
        await self.tokens.CreateSchedule(request, metadata=metadata(self.admin))
        if paused:
            pause = admin_service_pb2.PauseScheduleRequest(name=name)
            await self.tokens.PauseSchedule(pause, metadata=metadata(self.admin))
        return name

    async def cancelled_job(self) -> str:
        job_id = await self.enqueue()
        await self.jobs.CancelJob(job_service_pb2.CancelJobRequest(id=job_id), metadata=metadata(self.admin))
        return job_id


async def _status(call: Awaitable[object]) -> str:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code().name
    return "OK"


async def _connect(api: Api, token: str | None, queues: list[str] | None = None) -> str:
    """Opens a worker stream and reads the first answer: Welcome means the call was let in."""
    hello = wpb.Hello(worker_id="matrix-worker", queues=queues or [], wire_names=["tests.matrix"], capacity=1)
    outgoing: asyncio.Queue[wpb.ConnectRequest | None] = asyncio.Queue()
    outgoing.put_nowait(wpb.ConnectRequest(hello=hello))

    async def requests() -> AsyncIterator[wpb.ConnectRequest]:
        while (message := await outgoing.get()) is not None:
            yield message

    call = api.workers.Connect(requests(), metadata=metadata(token))
    try:
        first = await asyncio.wait_for(call.read(), 10)
        return "OK" if first.WhichOneof("kind") == "welcome" else f"unexpected {first}"
    except grpc.aio.AioRpcError as error:
        return error.code().name
    finally:
        outgoing.put_nowait(None)
        call.cancel()


async def _failed_attempt(running: RunningCoordinator) -> str:
    """A job whose one attempt failed with SECRET_TEXT, made through the store directly."""

    def work() -> str:
        [enqueued] = running.app.jobs.enqueue([NewJobSpec("tests.secret", b"{}", queue="secrets")])
        claim = ClaimRequest("w", ("secrets",), ("tests.secret",), 1, 60_000)
        [claimed] = running.app.ops.process(WorkBatch(claims=[claim])).claims[0]
        running.app.ops.process(WorkBatch(starts=[AttemptMessage(claimed.attempt_id, WorkerIdentity("w"))]))
        report = Report(
            Outcome.PERMANENT_FAILURE, "boom", "app.Boom", SECRET_TEXT, f"Traceback\n{SECRET_TEXT}"
        )
        running.app.ops.process(
            WorkBatch(results=[ResultReport(claimed.attempt_id, report, sender=WorkerIdentity("w"))])
        )
        assert enqueued.job_id == claimed.job.id
        return claimed.attempt_id

    return await asyncio.to_thread(work)


_empty_queues = itertools.count()


async def _empty_queue(running: RunningCoordinator) -> str:
    """A known queue that holds no jobs (one only an admin may delete), made in the store."""
    name = f"empty-{next(_empty_queues)}"
    now = running.app.clock.now_ms()
    await asyncio.to_thread(running.app.store.transact, lambda tx: tx.register_queues([name], now))
    return name


async def test_r21_every_rpc_answers_each_credential_exactly_as_the_scope_table_says(
    secured: RunningCoordinator,
) -> None:
    assert secured.bootstrap_token is not None
    async with grpc.aio.insecure_channel(secured.target) as channel:
        api = Api(channel, secured.bootstrap_token)
        tokens: dict[str, str | None] = {"none": None, "malformed": "not-a-runwick-token"}
        for scope in Scope:
            tokens[scope.value] = (await api.create_token(f"only-{scope.value}", [scope.value]))[1]
        tokens["forged"] = tokens["admin"][:-6] + "AAAAAA"  # type: ignore[index]
        revoked_id, tokens["revoked"] = await api.create_token("revoked", [s.value for s in Scope])
        await api.tokens.RevokeToken(
            admin_service_pb2.RevokeTokenRequest(id=revoked_id), metadata=metadata(api.admin)
        )
        job_id = await api.enqueue()
        attempt_id = await _failed_attempt(secured)

        async def call(method: str, token: str | None) -> str:
            md = metadata(token)
            name = method.rsplit("/", 1)[1]
            requests: dict[str, Callable[[], Awaitable[object]]] = {
                "Enqueue": lambda: api.jobs.Enqueue(
                    job_service_pb2.EnqueueRequest(jobs=[job_service_pb2.NewJob(wire_name="tests.matrix")]),
                    metadata=md,
                ),
                "GetJob": lambda: api.jobs.GetJob(job_service_pb2.GetJobRequest(id=job_id), metadata=md),
                "ListJobs": lambda: api.jobs.ListJobs(job_service_pb2.ListJobsRequest(), metadata=md),
                "ListAttempts": lambda: api.jobs.ListAttempts(
                    job_service_pb2.ListAttemptsRequest(job_id=job_id), metadata=md
                ),
                "WaitJob": lambda: api.jobs.WaitJob(
                    job_service_pb2.WaitJobRequest(id=job_id, timeout=Duration()), metadata=md
                ),
                "RevealError": lambda: api.jobs.RevealError(
                    job_service_pb2.RevealErrorRequest(attempt_id=attempt_id), metadata=md
                ),
                "ListTokens": lambda: api.tokens.ListTokens(
                    admin_service_pb2.ListTokensRequest(), metadata=md
                ),
                "ListAuditEvents": lambda: api.tokens.ListAuditEvents(
                    admin_service_pb2.ListAuditEventsRequest(), metadata=md
                ),
                "PurgeJobs": lambda: api.tokens.PurgeJobs(
                    admin_service_pb2.PurgeJobsRequest(
                        state=job_pb2.JOB_STATE_SUCCEEDED, older_than=Duration(seconds=86_400)
                    ),
                    metadata=md,
                ),
                "BulkCancelJobs": lambda: api.tokens.BulkCancelJobs(
                    admin_service_pb2.BulkCancelJobsRequest(
                        filter=admin_service_pb2.JobFilter(queue="no-such-queue")
                    ),
                    metadata=md,
                ),
                "BulkRetryJobs": lambda: api.tokens.BulkRetryJobs(
                    admin_service_pb2.BulkRetryJobsRequest(
                        filter=admin_service_pb2.JobFilter(queue="no-such-queue")
                    ),
                    metadata=md,
                ),
                "ListWorkers": lambda: api.tokens.ListWorkers(
                    admin_service_pb2.ListWorkersRequest(), metadata=md
                ),
                "CreateToken": lambda: api.tokens.CreateToken(
                    admin_service_pb2.CreateTokenRequest(name="made-in-matrix", scopes=["read"]), metadata=md
                ),
                "ListQueues": lambda: api.tokens.ListQueues(queue_pb2.ListQueuesRequest(), metadata=md),
                "GetQueue": lambda: api.tokens.GetQueue(
                    queue_pb2.GetQueueRequest(name="default"), metadata=md
                ),
                "PauseQueue": lambda: api.tokens.PauseQueue(
                    queue_pb2.PauseQueueRequest(name="default"), metadata=md
                ),
                "ResumeQueue": lambda: api.tokens.ResumeQueue(
                    queue_pb2.ResumeQueueRequest(name="default"), metadata=md
                ),
                "SetQueueLimit": lambda: api.tokens.SetQueueLimit(
                    queue_pb2.SetQueueLimitRequest(name="default", limit=5), metadata=md
                ),
                "SetQueueKeyLimit": lambda: api.tokens.SetQueueKeyLimit(
                    queue_pb2.SetQueueKeyLimitRequest(name="default", limit=5), metadata=md
                ),
                "SetQueueRate": lambda: api.tokens.SetQueueRate(
                    queue_pb2.SetQueueRateRequest(
                        name="default", rate=queue_pb2.QueueRate(count=5, period=Duration(seconds=1))
                    ),
                    metadata=md,
                ),
            }
            if name in requests:
                return await _status(requests[name]())
            if name == "CancelJob":
                target = await api.enqueue()
                return await _status(
                    api.jobs.CancelJob(job_service_pb2.CancelJobRequest(id=target), metadata=md)
                )
            if name == "RetryJob":
                target = await api.cancelled_job()
                return await _status(
                    api.jobs.RetryJob(job_service_pb2.RetryJobRequest(id=target), metadata=md)
                )
            if name == "RevokeToken":
                victim, _ = await api.create_token("victim", ["read"])
                return await _status(
                    api.tokens.RevokeToken(admin_service_pb2.RevokeTokenRequest(id=victim), metadata=md)
                )
            if name == "CreateSchedule":
                api.schedules_made += 1
                request = admin_service_pb2.CreateScheduleRequest(
                    name=f"made-in-matrix-{api.schedules_made}",
                    cron="0 0 1 1 *",
                    timezone="UTC",
                    wire_name="tests.matrix",
                )
                return await _status(api.tokens.CreateSchedule(request, metadata=md))
            if name == "ListSchedules":
                return await _status(
                    api.tokens.ListSchedules(admin_service_pb2.ListSchedulesRequest(), metadata=md)
                )
            if name in ("PauseSchedule", "ResumeSchedule", "DeleteSchedule"):
                target = await api.schedule(paused=name == "ResumeSchedule")
                message = getattr(admin_service_pb2, f"{name}Request")(name=target)
                return await _status(getattr(api.tokens, name)(message, metadata=md))
            if name == "DeleteQueue":
                target = await _empty_queue(secured)
                return await _status(
                    api.tokens.DeleteQueue(queue_pb2.DeleteQueueRequest(name=target), metadata=md)
                )
            if name == "Connect":
                return await _connect(api, token)
            raise AssertionError(f"no call for {method}: add one")

        actual = {(m, c): await call(m, tokens[c]) for m in METHOD_SCOPES for c in CREDENTIALS}
        expected = {
            (method, credential): (
                "OK"
                if credential == scope.value
                else "PERMISSION_DENIED"
                if credential in {s.value for s in Scope}
                else "UNAUTHENTICATED"
            )
            for method, scope in METHOD_SCOPES.items()
            for credential in CREDENTIALS
        }
        assert actual == expected

        # the one allowed reveal wrote one event; refused ones wrote none, leaked nothing.
        reveals = await api.tokens.ListAuditEvents(
            admin_service_pb2.ListAuditEventsRequest(action="attempt.reveal_error"),
            metadata=metadata(api.admin),
        )
        assert [(e.target, e.actor_name) for e in reveals.events] == [(attempt_id, "only-reveal")]
        assert reveals.events[0].peer.startswith("ipv4:127.0.0.1:")
        for credential in CREDENTIALS:
            if credential == "reveal":
                continue
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await api.jobs.RevealError(
                    job_service_pb2.RevealErrorRequest(attempt_id=attempt_id),
                    metadata=metadata(tokens[credential]),
                )
            assert "4111" not in str(refused.value.details()) + str(refused.value.debug_error_string())
        shown = await api.jobs.RevealError(
            job_service_pb2.RevealErrorRequest(attempt_id=attempt_id), metadata=metadata(tokens["reveal"])
        )
        assert (shown.message, shown.exception_type) == (SECRET_TEXT, "app.Boom")
        plain = await api.jobs.ListAttempts(
            job_service_pb2.ListAttemptsRequest(job_id=shown.job_id), metadata=metadata(tokens["read"])
        )
        assert "4111" not in str(plain)  # plain reads carry code and type only


def test_r21_the_scope_table_covers_every_rpc_of_every_service() -> None:
    methods = {
        f"/{service.full_name}/{method.name}"
        for module in (job_service_pb2, worker_service_pb2, admin_service_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert set(METHOD_SCOPES) == methods
    assert not any(m.startswith(OPEN_SERVICES) for m in METHOD_SCOPES)


async def test_r21_a_work_token_restricted_to_queues_may_only_hello_with_those(
    secured: RunningCoordinator,
) -> None:
    async with grpc.aio.insecure_channel(secured.target) as channel:
        api = Api(channel, secured.bootstrap_token or "")
        _, billing = await api.create_token("billing-worker", ["work"], ["billing", "refunds"])

        assert await _connect(api, billing, ["billing"]) == "OK"
        assert await _connect(api, billing, ["billing", "refunds"]) == "OK"
        assert await _connect(api, billing, ["billing", "emails"]) == "PERMISSION_DENIED"
        assert await _connect(api, billing, []) == "PERMISSION_DENIED"  # [] means "default"


async def test_r20_revoking_a_work_token_ends_its_open_streams(secured: RunningCoordinator) -> None:
    async with grpc.aio.insecure_channel(secured.target) as channel:
        api = Api(channel, secured.bootstrap_token or "")
        token_id, token = await api.create_token("w", ["work"])
        outgoing: asyncio.Queue[wpb.ConnectRequest | None] = asyncio.Queue()
        outgoing.put_nowait(wpb.ConnectRequest(hello=wpb.Hello(worker_id="w1", wire_names=["x"], capacity=1)))

        async def requests() -> AsyncIterator[wpb.ConnectRequest]:
            while (message := await outgoing.get()) is not None:
                yield message

        call = api.workers.Connect(requests(), metadata=metadata(token))
        assert (await call.read()).WhichOneof("kind") == "welcome"

        await api.tokens.RevokeToken(
            admin_service_pb2.RevokeTokenRequest(id=token_id), metadata=metadata(api.admin)
        )

        assert await asyncio.wait_for(call.read(), 10) is grpc.aio.EOF
        outgoing.put_nowait(None)
        assert await _connect(api, token) == "UNAUTHENTICATED"


async def test_r20_health_and_reflection_stay_open(secured: RunningCoordinator) -> None:
    assert await health_status(secured.target) == health_pb2.HealthCheckResponse.SERVING


async def test_r20_the_bootstrap_token_is_made_once_and_written_to_the_file(
    database_url: str, tmp_path: Any
) -> None:
    token_file = tmp_path / "secrets" / "admin-token"
    token_file.parent.mkdir()
    config = CoordinatorConfig(
        database_url=database_url, port=0, auth_enabled=True, admin_token_file=str(token_file)
    )
    first = await start_coordinator(config)
    await first.stop(grace_s=0)
    second = await start_coordinator(config)
    await second.stop(grace_s=0)

    assert first.bootstrap_token is not None and second.bootstrap_token is None
    assert token_file.read_text().strip() == first.bootstrap_token
    assert token_file.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.com"])
async def test_r20_insecure_is_refused_off_loopback(host: str, tmp_path: Any) -> None:
    config = CoordinatorConfig(database_url=f"sqlite:///{tmp_path / 'never.db'}", host=host, port=0)
    with pytest.raises(ConfigError, match="refused"):
        await start_coordinator(config)
    assert not (tmp_path / "never.db").exists()  # refused before anything was opened
