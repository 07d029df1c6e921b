"""A transient database fault fails nothing: ``Store.transact`` runs a body again on a
new connection when its connection failed before the commit (PostgreSQL: a terminated
backend), as it does after a write conflict, so a worker batch is still answered. And a
database error tells clients only that the database is unavailable: the driver's text
goes to the log, at WARNING.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.states import JobState
from coordinator.service.work import AttemptMessage, WorkBatch
from coordinator.store import DatabaseTimeouts, Store, StoreError, Tx

from .harness import WIRE, Harness, end_sessions

CLEAN_MESSAGE = "the database is unavailable; try again"
DRIVER_WORDS = ("FATAL", "terminating", "locked", "127.0.0.1", "5432", "psycopg", "sqlite3")


@dataclass
class Faulty:
    harness: Harness
    name: str
    """The ``application_name`` of the store's connections."""
    terminate: Callable[[], int]
    """Terminates the backend of each of the store's connections (``pg_terminate_backend``,
    waiting until each is gone); returns how many it ended."""

    def ours(self, conn: Any) -> bool:
        return bool(conn.engine.url.query.get("application_name") == self.name)


@pytest.fixture
def faulty(postgres_url: str) -> Iterator[Faulty]:
    """A harness whose store's connections are named, so a test can end them."""
    name = f"runwick-fault-{uuid.uuid4().hex[:8]}"
    url = make_url(postgres_url).update_query_dict({"application_name": name})
    store = Store.open(url.render_as_string(hide_password=False))
    try:
        yield Faulty(
            Harness.build(store, FakeClock(), CoordinatorConfig()),
            name,
            lambda: end_sessions(postgres_url, name),
        )
    finally:
        store.close()


@pytest.mark.postgres
def test_postgres_a_body_whose_backend_is_terminated_mid_transaction_runs_again(
    faulty: Faulty, caplog: pytest.LogCaptureFixture
) -> None:
    harness, terminate = faulty.harness, faulty.terminate
    job_id = harness.enqueue()
    tries: list[int] = []

    def body(tx: Tx) -> JobState:
        tries.append(len(tries) + 1)
        found = tx.jobs_by_ids([job_id])  # the transaction is open on its connection
        if len(tries) == 1:
            assert terminate() == 1
        return tx.jobs_by_ids([job_id])[job_id].state if found else JobState.FAILED

    with caplog.at_level(logging.WARNING, logger="coordinator.store"):
        state = harness.store.transact(body, what="a test body")

    assert (state, tries) == (JobState.AVAILABLE, [1, 2])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("a test body" in w and "terminating connection" in w for w in warnings), warnings


@pytest.mark.postgres
def test_postgres_transactions_after_the_backends_were_terminated_succeed(
    faulty: Faulty,
) -> None:
    harness, terminate = faulty.harness, faulty.terminate
    first = harness.enqueue()
    assert terminate() >= 1  # the pooled connection's backend, between two transactions

    second = harness.enqueue()

    assert {harness.job(first).state, harness.job(second).state} == {JobState.AVAILABLE}


@pytest.mark.postgres
def test_postgres_a_worker_batch_is_answered_when_its_backend_is_terminated_mid_batch(
    faulty: Faulty,
) -> None:
    """The batch loses its connection at its first statement; it runs again and every
    message in it is answered (the dispatcher closes no stream)."""
    harness, terminate = faulty.harness, faulty.terminate
    job_id = harness.enqueue(WIRE, queue=faulty.name)
    claimed = harness.claim_one(job_id)
    start = AttemptMessage(claimed.attempt_id, harness.holder(claimed.attempt_id))
    engine: type[Engine] = Engine
    statements: list[str] = []

    def terminate_once(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not faulty.ours(conn):
            return
        statements.append(statement)
        if len(statements) == 1:
            assert terminate() >= 1  # the batch's backend (and the read pool's, if open)

    event.listen(engine, "before_cursor_execute", terminate_once)
    try:
        answers = harness.ops.process(WorkBatch(starts=[start]))
    finally:
        event.remove(engine, "before_cursor_execute", terminate_once)

    assert answers.starts[0].granted
    assert harness.job(job_id).state is JobState.RUNNING
    assert len(statements) > 1  # the batch ran again after the first statement failed


@pytest.mark.postgres
def test_postgres_an_error_at_commit_is_not_retried(
    faulty: Faulty,
) -> None:
    """If the connection fails during COMMIT, whether it committed is unknown: the body
    must not run twice (an enqueue without idempotency key would create two jobs)."""
    harness, terminate = faulty.harness, faulty.terminate
    tries: list[int] = []
    engine: type[Engine] = Engine

    def terminate_before_commit(conn: Any) -> None:
        if faulty.ours(conn) and tries:
            assert terminate() == 1

    def body(tx: Tx) -> None:
        tries.append(1)
        tx.jobs_by_ids([job_id])  # the transaction is open: COMMIT has to reach the server

    job_id = harness.enqueue(queue=faulty.name)
    event.listen(engine, "commit", terminate_before_commit)
    try:
        with pytest.raises(StoreError) as failed:
            harness.store.transact(body)
    finally:
        event.remove(engine, "commit", terminate_before_commit)

    assert tries == [1]
    assert str(failed.value) == CLEAN_MESSAGE


def test_sqlite_a_database_error_tells_clients_only_that_the_database_is_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runwick.db"
    store = Store.open(f"sqlite:///{path}", timeouts=DatabaseTimeouts(sqlite_busy_timeout_ms=50))
    other_process = sqlite3.connect(path, isolation_level=None)
    try:
        harness = Harness.build(store, FakeClock(), CoordinatorConfig())
        other_process.execute("BEGIN IMMEDIATE")  # holds the write lock past busy_timeout
        with (
            caplog.at_level(logging.WARNING, logger="coordinator.store"),
            pytest.raises(StoreError) as failed,
        ):
            harness.enqueue()
    finally:
        other_process.close()
        store.close()

    assert str(failed.value) == CLEAN_MESSAGE
    assert failed.value.reason == "DATABASE_UNAVAILABLE"
    assert not [word for word in DRIVER_WORDS if word in str(failed.value)]
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "database is locked" in warning  # the driver's text, for the operator


# -- which driver errors are retried, on both engines -------------------------------------------

RETRIED = [
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
    psycopg.errors.CannotConnectNow("the database system is starting up"),
    psycopg.errors.IdleInTransactionSessionTimeout(
        "terminating connection due to idle-in-transaction timeout"
    ),
    psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 5432 failed'),
    psycopg.errors.DeadlockDetected("deadlock detected\nDETAIL:  Process 1 waits for ShareLock"),
    psycopg.errors.SerializationFailure("could not serialize access due to concurrent update"),
]
NOT_RETRIED = [
    psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"),
    psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    psycopg.errors.UniqueViolation("duplicate key value\nDETAIL:  Key (name)=(card 4242) already exists."),
    sqlite3.OperationalError("database is locked"),
]


def _failing_once(error: Exception, tries: list[int]) -> Callable[[Tx], str]:
    def body(tx: Tx) -> str:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            raise OperationalError("SELECT 1", {}, error)
        return "done"

    return body


@pytest.mark.parametrize("error", RETRIED, ids=lambda e: type(e).__name__)
def test_a_try_that_lost_its_connection_or_was_rolled_back_runs_again(store: Store, error: Exception) -> None:
    tries: list[int] = []

    assert store.transact(_failing_once(error, tries)) == "done"

    assert tries == [1, 2]


@pytest.mark.parametrize("error", NOT_RETRIED, ids=lambda e: type(e).__name__)
def test_other_database_errors_fail_at_once_with_a_clean_message(
    store: Store, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    tries: list[int] = []

    with caplog.at_level(logging.WARNING, logger="coordinator.store"), pytest.raises(StoreError) as failed:
        store.transact(_failing_once(error, tries), what="a test body")

    assert tries == [1]
    assert (str(failed.value), failed.value.reason) == (CLEAN_MESSAGE, "DATABASE_UNAVAILABLE")
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "a test body" in warning and str(error).splitlines()[0] in warning
    assert "DETAIL" not in warning and "4242" not in warning  # a row's values stay out of the log


@pytest.mark.postgres
def test_postgres_opening_the_store_survives_a_backend_terminated_at_the_schema_check(
    postgres_url: str,
) -> None:
    """Found by the chaos runs: a coordinator starting while a backend was terminated
    died with a traceback at its schema check. Opening the store tries again on a new
    connection, as a write transaction does."""
    admin = psycopg.connect(make_url(postgres_url).set(drivername="postgresql").render_as_string(False))
    admin.autocommit = True
    terminated: list[int] = []
    engine: type[Engine] = Engine

    def terminate_once(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if "alembic_version" in statement and not terminated:
            pid = cursor.connection.info.backend_pid
            terminated.append(pid)
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

    event.listen(engine, "before_cursor_execute", terminate_once)
    try:
        store = Store.open(postgres_url)
    finally:
        event.remove(engine, "before_cursor_execute", terminate_once)
        admin.close()
    try:
        assert len(terminated) == 1  # the check met a dead connection once, and went on
        assert store.count_by_state() is not None
    finally:
        store.close()


class _LateForwarder:
    """A TCP port that refuses connections until ``open()``, then forwards each one to
    ``upstream``: a database server that is still starting, as seen from a client."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()  # nothing listens there until open()
        self._server: socketserver.ThreadingTCPServer | None = None

    def open(self) -> None:
        upstream = self.upstream

        class Pipe(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with socket.create_connection(upstream) as remote:
                    threading.Thread(target=_copy, args=(remote, self.request), daemon=True).start()
                    _copy(self.request, remote)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Pipe)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _copy(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def test_postgres_opening_the_store_waits_for_a_database_that_refuses_connections(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the chaos runs: a coordinator started while PostgreSQL was recovering
    from a crash (it refuses connections for seconds) tried three times within a few
    milliseconds and died. Opening the store now waits, with growing pauses, for up to
    ``OPEN_WAIT_S``."""
    url = make_url(postgres_url)
    forwarder = _LateForwarder((url.host or "127.0.0.1", url.port or 5432))
    opening = threading.Timer(1.5, forwarder.open)
    opening.start()
    caplog.set_level(logging.WARNING, logger="coordinator.store.store")
    try:
        store = Store.open(url.set(host="127.0.0.1", port=forwarder.port).render_as_string(False))
        try:
            assert store.count_by_state() is not None
        finally:
            store.close()
    finally:
        opening.cancel()
        forwarder.close()
    waits = [r.getMessage() for r in caplog.records if "not reachable opening the store" in r.getMessage()]
    assert len(waits) >= 2, waits  # refused at least twice before the server "started"
    assert all("trying again in" in message for message in waits)


def test_opening_the_store_gives_up_on_other_errors_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A database that answers with something other than a lost connection (here a
    file that is not a database) fails at once: it is not tried again."""
    path = tmp_path / "not-a-database.db"
    path.write_bytes(b"this is not an SQLite file" * 100)
    caplog.set_level(logging.WARNING, logger="coordinator.store.store")
    with pytest.raises(DBAPIError, match="file is not a database"):
        Store.open(f"sqlite:///{path}")
    assert not [r for r in caplog.records if "not reachable opening the store" in r.getMessage()]
