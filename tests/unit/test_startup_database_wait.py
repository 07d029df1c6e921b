"""Which database failures a coordinator's start-up rides out (``store.driver_errors.
transient_at_start``), with the exception objects psycopg and sqlite3 really raise;
the retry loop (``app.startup``) and what ``runwick serve`` prints when it gives up."""

from __future__ import annotations

import argparse
import logging
import sqlite3

import psycopg
import psycopg.errors
import pytest
from sqlalchemy.exc import OperationalError

from coordinator.app import DatabaseKeptFailing, SchemaNotCurrent
from coordinator.app.startup import check_wait, open_riding_out_blips
from coordinator.cli.database import database_refusal
from coordinator.cli.exits import EXIT_DATABASE_UNSTABLE
from coordinator.config import ConfigError
from coordinator.store import StoreError, transient_at_start
from coordinator.store.driver_errors import worth_waiting_at_open

FAILED_AT = 'connection failed: connection to server at "127.0.0.1", port 5432 failed: '


def _wrapped(orig: BaseException) -> OperationalError:
    """As SQLAlchemy raises it: the driver's error inside a ``DBAPIError``."""
    return OperationalError("SELECT 1", None, orig)  # type: ignore[arg-type]


TRANSIENT = [
    psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
    psycopg.errors.CannotConnectNow("the database system is starting up"),
    psycopg.OperationalError(FAILED_AT + "FATAL:  the database system is shutting down"),
    psycopg.OperationalError(FAILED_AT + "FATAL:  the database system is in recovery mode"),
    psycopg.OperationalError("SSL connection has been closed unexpectedly"),
]
INPUT_LIKE = [
    psycopg.OperationalError(FAILED_AT + "Connection refused"),
    psycopg.OperationalError(FAILED_AT + 'FATAL:  database "nosuch" does not exist'),
    psycopg.OperationalError(FAILED_AT + 'FATAL:  password authentication failed for user "runwick"'),
    psycopg.OperationalError(FAILED_AT + 'FATAL:  role "nobody" does not exist'),
    psycopg.errors.InvalidPassword("password authentication failed"),
    psycopg.errors.UndefinedTable('relation "jobs" does not exist'),
    sqlite3.OperationalError("unable to open database file"),
    sqlite3.DatabaseError("file is not a database"),
    sqlite3.OperationalError("database is locked"),
]


@pytest.mark.parametrize("orig", TRANSIENT, ids=lambda e: str(e)[-40:])
def test_a_connection_made_then_lost_is_transient(orig: Exception) -> None:
    assert transient_at_start(_wrapped(orig))


@pytest.mark.parametrize("orig", INPUT_LIKE, ids=lambda e: str(e)[-40:])
def test_input_like_failures_and_sqlite_are_not_transient(orig: Exception) -> None:
    assert not transient_at_start(_wrapped(orig))


def test_a_transient_error_is_found_behind_the_error_that_wraps_it() -> None:
    try:
        try:
            raise _wrapped(TRANSIENT[0])
        except OperationalError as exc:
            raise StoreError() from exc
    except StoreError as outer:
        assert transient_at_start(outer)


def test_errors_that_are_not_the_drivers_are_not_transient() -> None:
    assert not transient_at_start(SchemaNotCurrent("the schema is at 0023; run runwick migrate"))
    assert not transient_at_start(ValueError("server closed the connection unexpectedly"))


async def test_the_start_tries_again_after_a_lost_connection_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []

    async def open_once(left_s: float) -> str:
        calls.append(left_s)
        if len(calls) < 3:
            raise _wrapped(TRANSIENT[0])
        return "opened"

    caplog.set_level(logging.WARNING, logger="coordinator.app.startup")
    assert await open_riding_out_blips(open_once, 30.0) == "opened"
    assert len(calls) == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2  # one line per retry
    assert all("server closed the connection unexpectedly" in w and "trying again" in w for w in warnings)


async def test_an_input_like_failure_is_raised_at_once() -> None:
    calls = 0

    async def open_once(left_s: float) -> str:
        nonlocal calls
        calls += 1
        raise _wrapped(INPUT_LIKE[1])

    with pytest.raises(OperationalError, match="does not exist"):
        await open_riding_out_blips(open_once, 30.0)
    assert calls == 1


async def test_a_wait_of_zero_tries_once_and_does_not_blame_the_url() -> None:
    calls = 0

    async def open_once(left_s: float) -> str:
        nonlocal calls
        calls += 1
        assert left_s == 0
        raise _wrapped(TRANSIENT[1])

    with pytest.raises(DatabaseKeptFailing) as raised:
        await open_riding_out_blips(open_once, 0)
    assert calls == 1 and raised.value.attempts == 1
    assert "administrator command" in raised.value.last


@pytest.mark.parametrize("wait", [-1.0, float("nan"), float("inf"), 3601.0])
def test_a_wait_out_of_range_is_refused(wait: float) -> None:
    with pytest.raises(ConfigError, match="startup_database_wait_s"):
        check_wait(wait)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_serve_says_the_database_kept_failing_with_its_own_status(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql+psycopg://u:secret@db/runwick"
    options = argparse.Namespace(database_url=url, log_format=log_format)
    gave_up = DatabaseKeptFailing(30.2, 7, "server closed the connection unexpectedly")
    assert database_refusal("serve", options, gave_up) == EXIT_DATABASE_UNSTABLE == 3
    said = capsys.readouterr().err
    assert "reachable but its connection kept failing" in said and "7 tries" in said
    assert "Check --database-url" not in said and "secret" not in said


def test_opening_the_store_waits_for_a_refused_connection_but_not_for_input() -> None:
    """A server restarting refuses connections for seconds: opening the store waits for
    it (up to the start-up wait). An unknown database or a refused password does not."""
    assert worth_waiting_at_open(_wrapped(INPUT_LIKE[0]))  # connection refused
    assert all(worth_waiting_at_open(_wrapped(orig)) for orig in TRANSIENT)
    assert not any(worth_waiting_at_open(_wrapped(orig)) for orig in INPUT_LIKE[1:])
