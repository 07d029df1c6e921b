"""A client or worker that would send its bearer token without TLS to another host
says so: one logging WARNING when it is made, naming it and the target, and never the
token. Loopback targets, TLS and token-less clients stay quiet."""

from __future__ import annotations

import logging

import pytest

from worker_sdk import AsyncClient, Client, ConnectionOptions, Worker
from worker_sdk._connection import is_local_target

TOKEN = "rwk_0123456789abcdef_" + "S" * 43
REMOTE = "runwick.internal:7233"


def clear_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and r.name.startswith("worker_sdk")
        and "WITHOUT TLS" in r.getMessage()
    ]


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:7233",
        "127.8.9.10:1",
        "localhost:7233",
        "LOCALHOST",
        "[::1]:7233",
        "::1",
        "dns:///localhost:7233",
        "dns://8.8.8.8/127.0.0.1:7233",
        "ipv4:127.0.0.1:7233,10.0.0.1:7233",
        "ipv6:[::1]:7233",
        "unix:/run/runwick.sock",
        "unix-abstract:runwick",
    ],
)
def test_targets_on_this_host_are_local(target: str) -> None:
    assert is_local_target(target)


@pytest.mark.parametrize(
    "target",
    [
        REMOTE,
        "10.0.0.5:7233",
        "[2001:db8::1]:7233",
        "0.0.0.0:7233",
        "dns:///runwick:7233",
        "localhost.evil.com:1",
    ],
)
def test_other_targets_are_not(target: str) -> None:
    assert not is_local_target(target)


def test_a_client_sending_a_token_in_clear_to_another_host_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="worker_sdk"), Client(REMOTE, token=TOKEN) as client:
        client.job_defaults(max_executions=3)  # using it adds nothing
    [warning] = clear_warnings(caplog)
    assert warning.startswith(f"Client sends its bearer token to {REMOTE} WITHOUT TLS")
    assert TOKEN not in caplog.text and "S" * 43 not in caplog.text


async def test_an_async_client_warns_too(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="worker_sdk"):
        async with AsyncClient(ConnectionOptions(REMOTE, token=TOKEN)):
            pass
    assert [w.split(" sends")[0] for w in clear_warnings(caplog)] == ["AsyncClient"]


def test_a_worker_warns_when_made(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="worker_sdk"):
        Worker(REMOTE, token=TOKEN, worker_id="w-1")
    assert [w.split(" sends")[0] for w in clear_warnings(caplog)] == ["Worker"]


@pytest.mark.parametrize(
    "connection",
    [
        ConnectionOptions(REMOTE, token=TOKEN, tls=True),
        ConnectionOptions("127.0.0.1:7233", token=TOKEN),
        ConnectionOptions(REMOTE),
    ],
    ids=["tls", "loopback", "no-token"],
)
def test_tls_loopback_or_no_token_is_quiet(
    caplog: pytest.LogCaptureFixture, connection: ConnectionOptions
) -> None:
    with caplog.at_level(logging.WARNING, logger="worker_sdk"), Client(connection):
        pass
    assert clear_warnings(caplog) == []
