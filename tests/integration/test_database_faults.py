"""A database outage seen through the real gRPC API: UNAVAILABLE with a clean message
and reason ``DATABASE_UNAVAILABLE``, never the driver's text (server, port, ``FATAL``),
which goes to the coordinator's log at WARNING; and service resumes when the database
is back. PostgreSQL: the server stops accepting connections to the coordinator's
database. SQLite: another process holds the write lock past ``busy_timeout``."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from coordinator.store import Store
from worker_sdk._errors import _rich_details
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

CLEAN_MESSAGE = "the database is unavailable; try again"
DRIVER_WORDS = ("FATAL", "connection to server", "127.0.0.1", "5432", "psycopg", "locked", "sqlite")
SOME_JOB = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"


def _config(database_url: str) -> CoordinatorConfig:
    return CoordinatorConfig(
        database_url=database_url,
        port=0,
        maintenance_interval_s=3600,
        idle_recheck_interval_s=3600,
        health_check_interval_s=3600,
        drain_timeout_s=1,
        sqlite_busy_timeout_ms=100,
    )


async def _enqueue(running: RunningCoordinator) -> grpc.aio.AioRpcError | None:
    """Enqueues one job (a write transaction); returns the error, if any."""
    request = job_service_pb2.EnqueueRequest(jobs=[job_service_pb2.NewJob(wire_name="tests.faults")])
    async with grpc.aio.insecure_channel(running.target) as channel:
        try:
            await job_service_pb2_grpc.JobServiceStub(channel).Enqueue(request, timeout=20)
        except grpc.aio.AioRpcError as error:
            return error
    return None


async def _get(running: RunningCoordinator, job_id: str) -> grpc.aio.AioRpcError | None:
    """Reads one job; returns the error, if any (NOT_FOUND counts as an answer)."""
    async with grpc.aio.insecure_channel(running.target) as channel:
        try:
            await job_service_pb2_grpc.JobServiceStub(channel).GetJob(
                job_service_pb2.GetJobRequest(id=job_id), timeout=20
            )
        except grpc.aio.AioRpcError as error:
            if error.code() is grpc.StatusCode.NOT_FOUND:
                return None
            return error
    return None


def _assert_clean(error: grpc.aio.AioRpcError | None) -> None:
    assert error is not None, "the call succeeded while the database was unavailable"
    assert error.code() is grpc.StatusCode.UNAVAILABLE, error.details()
    assert error.details() == CLEAN_MESSAGE
    reason, metadata, _ = _rich_details(error)
    assert reason == "DATABASE_UNAVAILABLE"
    shown = " ".join([error.details() or "", *metadata.values(), str(error.trailing_metadata())])
    assert not [word for word in DRIVER_WORDS if word in shown], shown


def _store_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name.startswith("coordinator.store")
    ]


@pytest.fixture
def scratch_postgres_url(postgres_url: str) -> Iterator[tuple[str, Engine, str]]:
    """A migrated database of its own (it is made unreachable), an admin engine and its
    name; dropped at the end."""
    name = f"runwick_faults_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    try:
        Store.open(url, create=True).close()
        yield url, admin, name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
async def test_postgres_an_unreachable_database_is_unavailable_with_a_clean_message(
    scratch_postgres_url: tuple[str, Engine, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, admin, name = scratch_postgres_url
    running = await start_coordinator(_config(url))
    try:
        assert await _enqueue(running) is None
        assert running.store.timeouts.sqlite_busy_timeout_ms == 100  # the config reaches the store
        with admin.connect() as conn:  # the server now refuses the coordinator's database
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'))
            conn.execute(
                text("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = :name"),
                {"name": name},
            )
        caplog.set_level(logging.WARNING, logger="coordinator.store")

        _assert_clean(await _enqueue(running))
        _assert_clean(await _get(running, SOME_JOB))
        warnings = _store_warnings(caplog)
        assert any("not currently accepting connections" in w for w in warnings), warnings

        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))
        assert await _enqueue(running) is None  # back without a restart
        assert await _get(running, SOME_JOB) is None
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))
        await running.stop(grace_s=1)


async def test_sqlite_a_locked_database_is_unavailable_with_a_clean_message(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runwick.db"
    running = await start_coordinator(_config(f"sqlite:///{path}"))
    other_process = sqlite3.connect(path, isolation_level=None)
    try:
        assert await _enqueue(running) is None
        other_process.execute("BEGIN IMMEDIATE")  # holds the write lock past busy_timeout
        caplog.set_level(logging.WARNING, logger="coordinator.store")

        _assert_clean(await _enqueue(running))
        assert any("database is locked" in w for w in _store_warnings(caplog))

        other_process.execute("ROLLBACK")
        assert await _enqueue(running) is None
    finally:
        other_process.close()
        await running.stop(grace_s=1)
