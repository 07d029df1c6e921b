"""A coordinator whose database connection is killed while it starts (found by the
chaos runs: ``pg_terminate`` during a restart ended the process with exit 2 and a
message that blamed the URL). The start now tries again for
``startup_database_wait_s``; when the wait runs out it says the database kept failing
(exit 3); an input-like failure still ends the start at once.

The fault is real: a start-up step (reading the database's clock) first has every
backend of the test database terminated with ``pg_terminate_backend`` and then uses a
connection that was killed, so the error is the one psycopg raises for it."""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from coordinator.app import DatabaseKeptFailing, facade
from coordinator.cli.database import database_refusal
from coordinator.config import CoordinatorConfig
from coordinator.process import start_coordinator
from coordinator.store import Store
from tests.support.processes import NO_FIXED_PORTS, ROOT, runwick_command
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

RETRY_LINE = "starting: the database connection failed"


def _config(database_url: str, wait_s: float) -> CoordinatorConfig:
    return CoordinatorConfig(
        database_url=database_url,
        port=0,
        maintenance_interval_s=3600,
        drain_timeout_s=1,
        startup_database_wait_s=wait_s,
    )


def _killed_connection_error(url: str) -> DBAPIError:
    """Terminates every other backend of ``url``'s database (the starting coordinator's
    among them) and returns the error of using a connection that was killed."""
    victim_engine = create_engine(url)
    killer_engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with victim_engine.connect() as victim, killer_engine.connect() as killer:
            killer.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            try:
                victim.execute(text("SELECT 1"))
            except DBAPIError as exc:
                return exc
    finally:
        victim_engine.dispose()
        killer_engine.dispose()
    raise AssertionError("the terminated connection still answered")


def _kill_first(url: str, times: int) -> Callable[[Store], int]:
    """``database_offset_ms`` whose first ``times`` calls meet a killed connection."""
    real = facade.database_offset_ms
    calls = 0

    def offset(store: Store) -> int:
        nonlocal calls
        calls += 1
        if calls <= times:
            raise _killed_connection_error(url)
        return real(store)

    return offset


async def test_postgres_start_rides_out_a_terminated_connection_and_serves(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(facade, "database_offset_ms", _kill_first(postgres_url, times=2))
    caplog.set_level(logging.WARNING, logger="coordinator.app.startup")
    running = await start_coordinator(_config(postgres_url, wait_s=30))
    try:
        assert await running.check_database()
        request = job_service_pb2.EnqueueRequest(jobs=[job_service_pb2.NewJob(wire_name="tests.blip")])
        async with grpc.aio.insecure_channel(running.target) as channel:
            reply = await job_service_pb2_grpc.JobServiceStub(channel).Enqueue(request, timeout=20)
        assert len(reply.jobs) == 1
    finally:
        await running.stop(grace_s=0)
    retries = [r.getMessage() for r in caplog.records if RETRY_LINE in r.getMessage()]
    assert len(retries) == 2, retries
    assert all("trying again" in line for line in retries)


async def test_postgres_start_gives_up_when_the_connection_keeps_failing(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(facade, "database_offset_ms", _kill_first(postgres_url, times=1000))
    with pytest.raises(DatabaseKeptFailing) as raised:
        await start_coordinator(_config(postgres_url, wait_s=0.5))
    assert raised.value.attempts >= 1
    options = argparse.Namespace(database_url=postgres_url, log_format="text")
    assert database_refusal("serve", options, raised.value) == 3
    said = capsys.readouterr().err
    assert "reachable but its connection kept failing" in said
    assert "Check --database-url" not in said


def _unknown_database(postgres_url: str, tmp_path: Path) -> str:
    return (
        make_url(postgres_url).set(database=f"runwick_missing_{uuid.uuid4().hex[:8]}").render_as_string(False)
    )


def _unopenable_sqlite(postgres_url: str, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'no-such-directory' / 'runwick.db'}"


@pytest.mark.parametrize("bad_url", [_unknown_database, _unopenable_sqlite], ids=["postgresql", "sqlite"])
def test_serve_with_a_bad_database_fails_at_once_with_exit_2(
    bad_url: Callable[[str, Path], str], postgres_url: str, tmp_path: Path
) -> None:
    url = bad_url(postgres_url, tmp_path)
    command = runwick_command(
        "serve", "--database-url", url, "--insecure", "--port", "0", *NO_FIXED_PORTS,
        "--startup-database-wait", "600",
    )  # fmt: skip
    done = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Check --database-url" in done.stderr
    assert RETRY_LINE not in done.stderr


def test_serve_against_a_server_that_drops_every_connection_exits_3(tmp_path: Path) -> None:
    """End to end through ``runwick serve``: a listener that accepts each connection and
    closes it at once is what libpq sees as "server closed the connection unexpectedly".
    The short wait runs out and serve says the database kept failing, with status 3."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def drop_connections() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                listener.accept()[0].close()

    dropper = threading.Thread(target=drop_connections, daemon=True)
    dropper.start()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/runwick"
    command = runwick_command(
        "serve", "--database-url", url, "--insecure", "--port", "0", *NO_FIXED_PORTS,
        "--startup-database-wait", "1",
    )  # fmt: skip
    try:
        done = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        dropper.join()
        listener.close()
    assert done.returncode == 3, done.stderr
    assert "reachable but its connection kept failing" in done.stderr
    assert "server closed the connection unexpectedly" in done.stderr
    assert "Check --database-url" not in done.stderr
