"""Attacks on the gRPC API port: oversized and unauthenticated requests, floods of jobs
in one Enqueue, and more streams or connections than the caps allow, against a real
coordinator. Each attack must be refused with a clear status, cost the coordinator
little memory, and leave it serving another client."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.api.ingress import SMALL_REQUEST_BYTES
from coordinator.config import CoordinatorConfig, IngressLimits
from coordinator.domain.access import COORDINATOR, Actor
from coordinator.errors import InvalidArgument
from coordinator.process import RunningCoordinator, start_coordinator
from coordinator.validation import MAX_TOKEN_QUEUES
from tests.support import eventually, reap, serve, stop, wait_listening
from tests.support.processes import NO_FIXED_PORTS
from worker_sdk._errors import translate_rpc_error
from worker_sdk.proto.runwick.v1 import admin_service_pb2, job_service_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as wpb

MIB = 1 << 20
EMPTY_JOB = b"\x0a\x00"
"""EnqueueRequest.jobs holding an empty NewJob: 2 bytes on the wire."""
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
"""A channel that opens its own connection instead of sharing one to the same target."""
RSS_GROWTH_LIMIT_BYTES = 50 * MIB
"""Generous: parsing the requests below costs gigabytes when they are not refused unread."""


def _kib(status_line: str) -> int:
    return int(status_line.split()[1]) * 1024


def memory(pid: int) -> tuple[int, int]:
    """(resident, peak resident) bytes of process ``pid``, from /proc."""
    rss = peak = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = _kib(line)
            elif line.startswith("VmHWM:"):
                peak = _kib(line)
    return rss, peak


@dataclass
class Served:
    process: subprocess.Popen[str]
    target: str


@contextlib.asynccontextmanager
async def served(tmp_path: Path, *flags: str) -> AsyncIterator[Served]:
    """``runwick serve`` on SQLite in its own process (so its memory can be read)."""
    log = tmp_path / "serve.log"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"
    process = serve(log, "--database-url", database, "--port", "0", *NO_FIXED_PORTS, *flags)
    try:
        yield Served(process, await wait_listening(process, log))
    finally:
        await stop(process)
        reap(process)


@contextlib.asynccontextmanager
async def in_process(database_url: str, **config: object) -> AsyncIterator[RunningCoordinator]:
    running = await start_coordinator(CoordinatorConfig(database_url=database_url, port=0, **config))  # type: ignore[arg-type]
    try:
        yield running
    finally:
        await running.stop(grace_s=1)


async def _call(target: str, method: str, body: bytes, token: str | None = None) -> grpc.aio.AioRpcError:
    """The error of a unary call of ``method`` with the raw ``body`` (it must fail)."""
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", -1)]) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await channel.unary_unary(method, None, None)(body, metadata=metadata, timeout=60)
    return caught.value


async def _healthy(target: str) -> bool:
    """Another client, on its own connection, is served."""
    async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


# -- unauthenticated and oversized requests are refused before they are read ------------------


async def test_tokenless_30_mb_requests_are_refused_unread(tmp_path: Path) -> None:
    """Eight tokenless 30 MB requests of empty sub-messages (about 2 GB each once parsed)
    at once: each is refused UNAUTHENTICATED, the coordinator's peak memory barely moves
    and another client is served."""
    async with served(tmp_path) as coordinator:
        pid = coordinator.process.pid
        before, _ = memory(pid)
        body = EMPTY_JOB * (15 * MIB)
        methods = ["/runwick.v1.JobService/Enqueue", "/runwick.v1.JobService/GetJob"] * 4
        errors = await asyncio.gather(*(_call(coordinator.target, method, body) for method in methods))
        assert {error.code() for error in errors} == {grpc.StatusCode.UNAUTHENTICATED}
        assert await _healthy(coordinator.target)
        _, peak = memory(pid)
        assert peak - before < RSS_GROWTH_LIMIT_BYTES, f"peak RSS grew by {(peak - before) // MIB} MiB"


async def test_a_token_without_the_scope_gets_its_30_mb_request_refused_unread(tmp_path: Path) -> None:
    """A valid token lacking the method's scope is refused (PERMISSION_DENIED) as unread
    as no token at all."""
    admin = "rwk_" + "0" * 16 + "_" + "a" * 43
    token_file = tmp_path / "admin-token"
    token_file.write_text(admin)
    async with served(tmp_path, "--bootstrap-token-file", str(token_file)) as coordinator:
        async with grpc.aio.insecure_channel(coordinator.target) as channel:
            created = await channel.unary_unary(
                "/runwick.v1.AdminService/CreateToken",
                admin_service_pb2.CreateTokenRequest.SerializeToString,
                admin_service_pb2.CreateTokenResponse.FromString,
            )(
                admin_service_pb2.CreateTokenRequest(name="reader", scopes=["read"]),
                metadata=(("authorization", f"Bearer {admin}"),),
                timeout=10,
            )
        pid = coordinator.process.pid
        before, _ = memory(pid)
        body = EMPTY_JOB * (15 * MIB)
        errors = await asyncio.gather(
            *(
                _call(coordinator.target, "/runwick.v1.JobService/Enqueue", body, created.secret)
                for _ in range(4)
            )
        )
        assert {error.code() for error in errors} == {grpc.StatusCode.PERMISSION_DENIED}
        assert await _healthy(coordinator.target)
        _, peak = memory(pid)
        assert peak - before < RSS_GROWTH_LIMIT_BYTES, f"peak RSS grew by {(peak - before) // MIB} MiB"


async def test_a_5_million_job_enqueue_is_refused_before_parsing(tmp_path: Path) -> None:
    """A 10 MB Enqueue of 5,000,000 empty jobs (over a gigabyte once parsed and
    converted): BATCH_TOO_LARGE, nothing stored, memory barely moves."""
    async with served(tmp_path, "--insecure") as coordinator:
        pid = coordinator.process.pid
        before, _ = memory(pid)
        error = await _call(coordinator.target, "/runwick.v1.JobService/Enqueue", EMPTY_JOB * 5_000_000)
        translated = translate_rpc_error(error)
        assert (translated.status_code, translated.reason) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "BATCH_TOO_LARGE",
        )
        assert "more than 500 jobs" in str(translated)
        assert await _healthy(coordinator.target)
        _, peak = memory(pid)
        assert peak - before < RSS_GROWTH_LIMIT_BYTES, f"peak RSS grew by {(peak - before) // MIB} MiB"
        listed = await _list_jobs(coordinator.target)
        assert list(listed.jobs) == []


async def _list_jobs(target: str) -> job_service_pb2.ListJobsResponse:
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(
            "/runwick.v1.JobService/ListJobs",
            request_serializer=job_service_pb2.ListJobsRequest.SerializeToString,
            response_deserializer=job_service_pb2.ListJobsResponse.FromString,
        )
        response: job_service_pb2.ListJobsResponse = await call(job_service_pb2.ListJobsRequest(), timeout=10)
        return response


@pytest.mark.parametrize(
    "method",
    [
        "/runwick.v1.JobService/GetJob",
        "/runwick.v1.AdminService/ListQueues",
        "/runwick.v1.AdminService/GetQueue",
        "/grpc.health.v1.Health/Check",
    ],
)
async def test_a_small_method_refuses_a_request_over_its_own_limit(database_url: str, method: str) -> None:
    """Methods other than Enqueue, the worker stream and creations take 64 KiB: one byte
    more is RESOURCE_EXHAUSTED naming the limit, though the port takes 38 MiB for Enqueue."""
    async with in_process(database_url) as running:
        body = b"\x0a" + _varint(SMALL_REQUEST_BYTES) + b"x" * SMALL_REQUEST_BYTES  # field 1, 64 KiB
        error = translate_rpc_error(await _call(running.target, method, body))
        assert (error.status_code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "REQUEST_TOO_LARGE")
        assert error.metadata["limit_bytes"] == str(SMALL_REQUEST_BYTES)
        assert await _healthy(running.target)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


async def test_a_token_request_with_too_many_queues_is_refused_and_creates_nothing(database_url: str) -> None:
    async with in_process(database_url) as running:
        request = admin_service_pb2.CreateTokenRequest(
            name="many", scopes=["work"], queues=[f"q{n}" for n in range(MAX_TOKEN_QUEUES + 1)]
        )
        error = translate_rpc_error(
            await _call(running.target, "/runwick.v1.AdminService/CreateToken", request.SerializeToString())
        )
        assert (error.status_code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "OUT_OF_RANGE")
        assert [v.field for v in error.field_violations] == ["queues"]
        assert await running.app.list_tokens(include_revoked=True) == []
        # The token service holds the same bound for callers other than the API.
        with pytest.raises(InvalidArgument, match="over the limit of 1000"):
            await running.app.create_token("many", ["work"], request.queues, Actor(COORDINATOR, "test"))
        assert await running.app.list_tokens(include_revoked=True) == []


async def test_a_hello_listing_too_many_names_is_refused_before_parsing(database_url: str) -> None:
    """Names are counted as sent, repeats included: 5,000 copies of one queue (one queue
    once de-duplicated) are refused, and no worker connects."""
    async with in_process(database_url) as running:
        hello = wpb.Hello(worker_id="greedy", capacity=1, queues=["q"] * 5_000, wire_names=["w"])
        async with grpc.aio.insecure_channel(running.target) as channel:
            call = channel.stream_stream(
                "/runwick.v1.WorkerService/Connect",
                wpb.ConnectRequest.SerializeToString,
                wpb.ConnectResponse.FromString,
            )(iter([wpb.ConnectRequest(hello=hello)]), timeout=30)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in call:
                    raise AssertionError("the stream was welcomed")
        error = translate_rpc_error(caught.value)
        assert (error.status_code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "OUT_OF_RANGE")
        assert [v.field for v in error.field_violations] == ["hello.queues"]
        assert not list(running.app.dispatcher.sessions)


# -- caps on streams, calls and connections ----------------------------------------------------


async def _watch(channel: grpc.aio.Channel) -> Any:
    """A health Watch, once its first answer came (the server holds it open)."""
    call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    await call.read()
    return call


async def _refused_watch(channel: grpc.aio.Channel) -> grpc.StatusCode:
    call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    return caught.value.code()


async def test_health_watches_past_the_cap_are_refused_on_both_ports(tmp_path: Path) -> None:
    limits = IngressLimits(max_health_watches=3)
    async with in_process(f"sqlite:///{tmp_path / 'r.db'}", ingress=limits, health_port=0) as running:
        for target in (running.target, f"127.0.0.1:{running.health_port}"):
            async with grpc.aio.insecure_channel(target) as channel:
                held = [await _watch(channel) for _ in range(3)]
                assert await _refused_watch(channel) is grpc.StatusCode.RESOURCE_EXHAUSTED
                held.pop().cancel()
                # A place freed is a place taken again.
                await eventually(
                    lambda target=target: _watches(running, target) == 2,  # type: ignore[misc]
                    what="the cancelled watch to end",
                )
                held.append(await _watch(channel))
                for call in held:
                    call.cancel()
        assert await _healthy(running.target)


def _watches(running: RunningCoordinator, target: str) -> int:
    health = running.grpc.health
    servicer = health.api if target == running.target else health.probes
    return servicer.watches


async def test_calls_past_the_concurrent_rpc_cap_are_refused(tmp_path: Path) -> None:
    limits = IngressLimits(max_concurrent_rpcs=3)
    async with in_process(f"sqlite:///{tmp_path / 'r.db'}", ingress=limits) as running:
        async with grpc.aio.insecure_channel(running.target) as channel:
            held = [await _watch(channel) for _ in range(3)]
            error = await _call(running.target, "/runwick.v1.AdminService/ListQueues", b"")
            assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            for call in held:
                call.cancel()
        assert await eventually_healthy(running.target)


async def eventually_healthy(target: str) -> bool:
    async def served() -> bool:
        try:
            return await _healthy(target)
        except grpc.aio.AioRpcError:
            return False

    for _ in range(100):
        if await served():
            return True
        await asyncio.sleep(0.1)
    return False


async def test_one_connection_gets_no_more_streams_than_the_cap(tmp_path: Path) -> None:
    """Past ``max_streams_per_connection`` a client's call waits on its side (here until
    its deadline), while another connection is served."""
    limits = IngressLimits(max_streams_per_connection=2)
    async with (
        in_process(f"sqlite:///{tmp_path / 'r.db'}", ingress=limits) as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        held = [await _watch(channel) for _ in range(2)]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
        assert caught.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert running.grpc.health.api.watches == 2
        assert await _healthy(running.target)  # its own connection
        for call in held:
            call.cancel()


async def _connected(target: str) -> tuple[grpc.aio.Channel, Any]:
    """A channel on its own connection holding a health Watch open (so the connection
    carries a stream while it is counted)."""
    channel = grpc.aio.insecure_channel(target, options=OWN_CONNECTION)
    return channel, await _watch(channel)


async def _refused_connection(target: str) -> grpc.StatusCode:
    """The status of a call on a new connection that must fail."""
    async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return caught.value.code()


async def test_connections_past_the_cap_are_closed_and_closed_ones_free_their_place(tmp_path: Path) -> None:
    """Three connections, each carrying a stream, fill a cap of three on both ports: a
    fourth is closed as it is accepted (UNAVAILABLE). Closing them frees their places,
    round after round, so workers are never locked out by connections that ended."""
    limits = IngressLimits(max_connections=3)
    async with in_process(f"sqlite:///{tmp_path / 'r.db'}", ingress=limits, health_port=0) as running:
        for target in (running.target, f"127.0.0.1:{running.health_port}"):
            for _ in range(3):
                held = [await _connected(target) for _ in range(3)]
                assert await _refused_connection(target) is grpc.StatusCode.UNAVAILABLE
                for channel, call in held:
                    call.cancel()
                    await channel.close(grace=None)
                del held, channel, call  # a live call object keeps its socket open
                assert await eventually_healthy(target)


_WATCHING_CLIENT = """
import sys, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
channel = grpc.insecure_channel(sys.argv[1])
watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
next(watch)
print("watching", flush=True)
time.sleep(600)
"""


async def test_clients_killed_mid_stream_free_their_connections(tmp_path: Path) -> None:
    """Clients that die holding a stream (a worker's process killed) close their sockets
    with them; the cap counts them no longer, and new clients are served."""
    limits = IngressLimits(max_connections=2)
    async with in_process(f"sqlite:///{tmp_path / 'r.db'}", ingress=limits) as running:
        clients = []
        for _ in range(2):
            client = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _WATCHING_CLIENT, running.target, stdout=subprocess.PIPE
            )
            assert client.stdout is not None
            clients.append(client)
            assert await asyncio.wait_for(client.stdout.readline(), 60) == b"watching\n"
        assert await _refused_connection(running.target) is grpc.StatusCode.UNAVAILABLE
        for client in clients:
            client.kill()
            await client.wait()
        assert await eventually_healthy(running.target)
        held = [await _connected(running.target) for _ in range(2)]  # both places free
        for channel, call in held:
            call.cancel()
            await channel.close(grace=None)


async def test_a_malformed_health_watch_is_invalid_argument_not_internal(tmp_path: Path) -> None:
    async with (
        in_process(f"sqlite:///{tmp_path / 'r.db'}") as running,
        grpc.aio.insecure_channel(running.target) as channel,
    ):
        call = channel.unary_stream("/grpc.health.v1.Health/Watch", None, None)(b"\x0a\x05ab", timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call.read()
        error = translate_rpc_error(caught.value)
        assert (error.status_code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_MESSAGE")
        assert await _healthy(running.target)
