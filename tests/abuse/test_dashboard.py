"""The web dashboard attacked over real HTTP (issue 40): a real coordinator on port 0,
raw sockets where the attack is in the bytes, and after each attack the functional
outcome: refused before any work, nothing changed, and the process still serving.

- a 50 MB multipart sign-in and oversized forms are refused before their bodies are read;
- the session cookie is not the token, ends at sign-out on every replica;
- with authentication off, another ``Host`` (DNS rebinding) and another ``Origin`` are
  refused;
- sign-in guessing is limited per address and its log sampled;
- idle connections are closed, and connections past the cap are not kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
import pytest
import starlette.formparsers

from coordinator.config import CoordinatorConfig, DashboardLimits
from coordinator.domain.access import SYSTEM_ACTOR
from coordinator.domain.records import NewJobSpec
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.test_dashboard_http import CSRF, Session
from tests.support.polling import eventually_async
from worker_sdk.proto.runwick.v1 import admin_service_pb2_grpc, queue_pb2

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
WAIT_S = 15.0
"""How long a raw client waits for the server's answer; the server answers at once when
it refuses, and never when it does not (the test then fails on this timeout)."""


async def _start(database_url: str, **config: Any) -> RunningCoordinator:
    limits = config.pop("limits", {})
    settings: dict[str, Any] = {"auth_enabled": True, **config}
    return await start_coordinator(
        CoordinatorConfig(
            database_url=database_url,
            port=0,
            dashboard_port=0,
            drain_timeout_s=1,
            dashboard_limits=replace(DashboardLimits(), **limits),
            **settings,
        )
    )


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[RunningCoordinator]:
    running = await _start(database_url)
    yield running
    await running.stop(grace_s=1)


def _port(running: RunningCoordinator) -> int:
    assert running.dashboard_port is not None
    return running.dashboard_port


def _exchange(port: int, head: bytes, body: bytes = b"") -> tuple[int, str]:
    """Sends ``head`` and as much of ``body`` as the server takes, and reads the answer's
    status and head. Raises TimeoutError when no answer comes within ``WAIT_S``."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(head)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(body)  # a refusal may close the connection before all of it
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65_536)
            if not chunk:
                break
            received += chunk
    text = received.decode("latin-1")
    assert text.startswith("HTTP/1.1 "), text[:200]
    return int(text[9:12]), text


def _post_head(port: int, path: str, content_type: str, length: int | None, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Type: {content_type}"]
    if length is None:
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append(f"Content-Length: {length}")
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _closed_by_server(port: int, sent: bytes = b"") -> bool:
    """Connects, sends ``sent``, then waits: True when the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        if sent:
            sock.sendall(sent)
        try:
            return sock.recv(65_536) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


# -- 1. bodies: refused before they are read ----------------------------------------------


@SQLITE_ONLY
async def test_a_50_mb_multipart_sign_in_is_refused_before_its_body_is_read(
    secured: RunningCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    spooled: list[object] = []
    real = tempfile.SpooledTemporaryFile

    def recording(*args: Any, **kwargs: Any) -> Any:
        spooled.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(starlette.formparsers, "SpooledTemporaryFile", recording)
    port = _port(secured)
    boundary = "x" * 16
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="token"; filename="a.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode() + b"\0" * 65_536
    head = _post_head(port, "/signin", f"multipart/form-data; boundary={boundary}", 50_000_000)

    status, _ = await asyncio.to_thread(_exchange, port, head, part)

    assert status == 415
    assert spooled == []  # no part was spooled, in memory or on disk
    assert (await Session(port).get("/signin")).status == 200  # and the next client is served


@SQLITE_ONLY
async def test_a_form_over_the_cap_is_refused_whether_its_length_is_declared_or_not(
    secured: RunningCoordinator,
) -> None:
    port = _port(secured)
    cap = DashboardLimits().max_form_bytes
    declared = _post_head(port, "/signin", "application/x-www-form-urlencoded", 50_000_000)
    status, _ = await asyncio.to_thread(_exchange, port, declared, b"token=" + b"a" * 65_536)
    assert status == 413

    session = Session(port)
    page = await session.get("/signin")  # a real form's nonce, so only the size is wrong
    nonce = CSRF.search(page.body)
    assert nonce is not None
    cookie = "; ".join(f"{k}={v}" for k, v in session.cookies.items())
    chunked = _post_head(port, "/signin", "application/x-www-form-urlencoded", None, Cookie=cookie)
    body = f"csrf={nonce.group(1)}&token=".encode() + b"a" * (cap + 1)
    chunks = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    status, answer = await asyncio.to_thread(_exchange, port, chunked, chunks)
    assert status == 413 and "runwick_session" not in answer


@SQLITE_ONLY
async def test_an_action_without_a_session_is_refused_before_its_endless_body(
    secured: RunningCoordinator,
) -> None:
    port = _port(secured)
    head = _post_head(port, "/queues/default/pause", "application/x-www-form-urlencoded", None)

    def refused_then_closed() -> tuple[int, bool]:
        """Sends the head and a first chunk, reads the answer, then goes on sending the
        body a little at a time (which keeps uvicorn's own keep-alive timer from ever
        firing): True when the server closes the connection meanwhile."""
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
            sock.sendall(head + b"100000\r\n" + b"a" * 1_024)  # a chunk that never ends
            received = b""
            while b"\r\n\r\n" not in received:
                received += sock.recv(65_536)
            sock.settimeout(0.25)
            for _ in range(40):
                try:
                    sock.sendall(b"a" * 1_024)
                    if sock.recv(65_536) == b"":
                        return int(received[9:12]), True
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    return int(received[9:12]), True
        return int(received[9:12]), False

    status, closed = await asyncio.to_thread(refused_then_closed)
    assert status == 401 and closed


# -- 2. sessions: the cookie is not the token, and sign-out ends it --------------------


async def test_the_cookie_is_not_the_token_and_does_not_work_as_one(secured: RunningCoordinator) -> None:
    app = secured.app
    created = await app.create_token("operator", ["read", "admin"], [], SYSTEM_ACTOR)
    session = Session(_port(secured))
    assert (await session.sign_in(created.token)).status == 303
    cookie = session.cookies["runwick_session"]

    assert created.token not in cookie and created.token.split("_")[-1] not in cookie
    async with grpc.aio.insecure_channel(f"127.0.0.1:{secured.port}") as channel:
        admin = admin_service_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await admin.ListQueues(
                queue_pb2.ListQueuesRequest(), metadata=(("authorization", f"Bearer {cookie}"),)
            )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_cookie_cut_out_before_sign_out_no_longer_works_after_it(secured: RunningCoordinator) -> None:
    port = _port(secured)
    created = await secured.app.create_token("operator", ["read"], [], SYSTEM_ACTOR)
    victim = Session(port)
    assert (await victim.sign_in(created.token)).status == 303
    thief = Session(port, cookies=dict(victim.cookies))
    assert (await thief.get("/jobs")).status == 200

    csrf = await victim.csrf("/")
    assert (await victim.post("/signout", {"csrf": csrf})).header("location") == "/signin"

    assert (await thief.get("/jobs")).header("location") == "/signin?next=%2Fjobs"
    assert (await thief.get("/jobs?fragment=1")).status == 401


@POSTGRES_ONLY
async def test_a_session_is_one_across_replicas_and_signing_out_on_one_ends_it_on_all(
    database_url: str,
) -> None:
    first = await _start(database_url)
    second = await _start(database_url)
    try:
        created = await first.app.create_token("operator", ["read"], [], SYSTEM_ACTOR)
        on_first = Session(_port(first))
        assert (await on_first.sign_in(created.token)).status == 303
        on_second = Session(_port(second), cookies=dict(on_first.cookies))
        assert (await on_second.get("/queues")).status == 200  # the other replica knows it

        csrf = await on_second.csrf("/")
        assert (await on_second.post("/signout", {"csrf": csrf})).status == 303

        assert (await on_first.get("/queues")).header("location") == "/signin?next=%2Fqueues"
    finally:
        await second.stop(grace_s=1)
        await first.stop(grace_s=1)


# -- 3. Host and Origin with authentication off ------------------------------------------


@pytest.fixture
async def insecure(database_url: str) -> AsyncIterator[RunningCoordinator]:
    running = await _start(database_url, auth_enabled=False, dashboard_allowed_hosts=("runwick.internal",))
    await running.app.enqueue([NewJobSpec("tests.echo", b"{}", queue="billing")])
    yield running
    await running.stop(grace_s=1)


async def _paused(running: RunningCoordinator) -> bool:
    page, _ = await running.app.list_queues()
    (billing,) = [s for s in page if s.queue.name == "billing"]
    return billing.queue.paused


@SQLITE_ONLY
async def test_a_rebound_host_name_is_refused_and_reads_nothing(insecure: RunningCoordinator) -> None:
    port = _port(insecure)
    head = f"GET /queues HTTP/1.1\r\nHost: attacker.example:{port}\r\n\r\n".encode()

    status, answer = await asyncio.to_thread(_exchange, port, head)

    assert status == 421 and "billing" not in answer
    for name in ("localhost", "127.0.0.1", "[::1]", "runwick.internal"):
        head = f"GET /queues HTTP/1.1\r\nHost: {name}:{port}\r\nConnection: close\r\n\r\n".encode()
        assert (await asyncio.to_thread(_exchange, port, head))[0] == 200, name


@SQLITE_ONLY
async def test_a_form_from_another_origin_is_refused_and_pauses_nothing(insecure: RunningCoordinator) -> None:
    port = _port(insecure)
    session = Session(port)
    csrf = await session.csrf("/queues")  # even with a valid CSRF token
    body = f"csrf={csrf}&next=%2Fqueues".encode()
    form = "application/x-www-form-urlencoded"

    for headers in (
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Origin": f"http://127.0.0.1:{port + 1}"},
        {"Sec_Fetch_Site": "cross-site"},  # a browser's request with its Origin left out
    ):
        head = _post_head(port, "/queues/billing/pause", form, len(body), **headers)
        status, _ = await asyncio.to_thread(_exchange, port, head, body)
        assert status == 403, headers
        assert not await _paused(insecure)

    same_origin = _post_head(
        port, "/queues/billing/pause", form, len(body), Origin=f"http://127.0.0.1:{port}"
    )
    assert (await asyncio.to_thread(_exchange, port, same_origin, body))[0] == 303
    assert await _paused(insecure)


# -- 4. sign-in guessing ---------------------------------------------------------------


@SQLITE_ONLY
async def test_sign_in_guessing_is_limited_per_address_and_its_log_sampled(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    running = await _start(database_url, limits={"signin_burst": 5, "signin_refill_per_s": 0.001})
    try:
        created = await running.app.create_token("operator", ["read"], [], SYSTEM_ACTOR)
        session = Session(_port(running))
        caplog.set_level(logging.INFO, logger="coordinator.dashboard.web")
        answers = [(await session.sign_in(f"rwk_{i:016x}_{'A' * 43}")).status for i in range(12)]

        assert answers[:5] == [401] * 5 and answers[5:] == [429] * 7
        limited = await session.sign_in(created.token)  # the right token is no way around it
        assert limited.status == 429 and limited.header("retry-after") is not None
        assert "runwick_session" not in session.cookies
        refused_lines = [r for r in caplog.records if "refused" in r.getMessage()]
        limit_lines = [r for r in caplog.records if "over the limit" in r.getMessage()]
        assert len(refused_lines) == 1 and len(limit_lines) == 1  # not one line per attempt
        assert (await session.get("/signin")).status == 200  # pages still answer
    finally:
        await running.stop(grace_s=1)


# -- 5. the port's connections -----------------------------------------------------------


@SQLITE_ONLY
async def test_an_idle_connection_is_closed_after_the_idle_time(database_url: str) -> None:
    running = await _start(database_url, limits={"idle_timeout_s": 1})
    try:
        port = _port(running)
        assert await asyncio.to_thread(_closed_by_server, port)  # sent nothing at all
        assert await asyncio.to_thread(_closed_by_server, port, b"GET / HTTP/1.1\r\nHo")  # half a head
        assert (await Session(port).get("/signin")).status == 200
    finally:
        await running.stop(grace_s=1)


@SQLITE_ONLY
async def test_connections_past_the_cap_are_closed_and_the_api_keeps_serving(database_url: str) -> None:
    running = await _start(database_url, limits={"max_connections": 4, "idle_timeout_s": 60})
    port = _port(running)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        assert await asyncio.to_thread(_closed_by_server, port)  # the fifth is not kept
        assert running.bootstrap_token is not None
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            admin = admin_service_pb2_grpc.AdminServiceStub(channel)
            token = (("authorization", f"Bearer {running.bootstrap_token}"),)
            await admin.ListQueues(queue_pb2.ListQueuesRequest(), metadata=token)
    finally:
        for sock in held:
            sock.close()
    try:
        # The server notices the closed connections as it reads them; then it serves again.
        await eventually_async(lambda: _serves(port), what="the dashboard serving once they closed")
    finally:
        await running.stop(grace_s=1)


async def _serves(port: int) -> bool:
    try:
        return (await Session(port).get("/signin")).status == 200
    except (ConnectionError, OSError):
        return False
