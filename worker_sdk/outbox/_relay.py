"""``OutboxRelay``: forwards committed outbox rows to the coordinator and deletes them
once acknowledged.

One batch is one transaction of the application's database: take the oldest pending
rows (locked on PostgreSQL, where other relays skip them), send their jobs in one
``Enqueue`` call, delete them, commit. A crash anywhere leaves the rows in place, and
every job carries the idempotency key its row was written with, so the next send of a
row the coordinator already took returns the same job: each committed row becomes
exactly one job. A passing failure (coordinator or database unavailable) rolls back and
waits with a doubling backoff; rows wait, nothing is lost. A row refused for good
(INVALID_ARGUMENT and the like) is moved aside with its error, so it blocks nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

import grpc
from prometheus_client import CollectorRegistry
from sqlalchemy import Connection, Engine, Table, create_engine, inspect
from sqlalchemy import exc as sa_exc

from worker_sdk._connection import ConnectionOptions, connection_options
from worker_sdk._errors import (
    AlreadyExists,
    ArgumentError,
    JobNotFound,
    MessageTooLarge,
    PermissionDenied,
    RunwickError,
    translated_rpc_errors,
)
from worker_sdk.outbox._config import RelayConfig
from worker_sdk.outbox._metrics import RelayMetrics
from worker_sdk.outbox._relay_rows import PendingRow, backlog, delete_rows, move_aside, take_batch
from worker_sdk.outbox._rows import decode_job
from worker_sdk.outbox._table import outbox_table
from worker_sdk.outbox._wakeup import Wakeup, wakeup_for
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

_log = logging.getLogger(__name__)

PERMANENT = (ArgumentError, JobNotFound, AlreadyExists, MessageTooLarge)
"""Refusals a resend cannot change: a bad job, a missing parent, a taken job ID, a job
too large for any message. Everything else is passing (the rows wait)."""
PASSING = (RunwickError, sa_exc.OperationalError, sa_exc.InterfaceError)
"""Failures after which the batch is rolled back and tried again after a backoff."""


class OutboxDatabaseError(RunwickError):
    """The application's database cannot be reached, or has no outbox table."""


class OutboxRelay:
    """Relays an outbox table to the coordinator: ``run()`` in a thread or process of
    its own, ``start()``/``stop()`` (or ``with relay:``, ``async with relay:``) inside a
    Worker's or a web server's process.

    Args:
        database: The application's database: a SQLAlchemy URL or ``Engine``.
        target: The coordinator, as for ``Client`` (``host:port`` or ``ConnectionOptions``).
        token: A bearer token with the ``enqueue`` scope (with a str ``target``).
        table: The outbox table (by default ``outbox_table()``, ``runwick_outbox``).
        config: Batch size, poll interval, backoff, ...
        registry: The Prometheus registry for the metrics (the default one when None).
        observer: Called with a step name (``"before_send"``, ``"after_ack"``) at those
            points of each batch; for tests that crash the relay there, and tracing.

    Raises:
        ArgumentError: ``database`` is not a database URL, or its driver is missing.
    """

    def __init__(
        self,
        database: str | Engine,
        target: str | ConnectionOptions,
        *,
        token: str | None = None,
        table: Table | None = None,
        config: RelayConfig | None = None,
        registry: CollectorRegistry | None = None,
        observer: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config or RelayConfig()
        self.table = table if table is not None else outbox_table()
        self._engine = database if isinstance(database, Engine) else _engine(database)
        self._connection = connection_options(
            target, token=token, ca=None, cert=None, key=None, tls=False, credentials=None, channel_options=()
        )
        self._channel: grpc.Channel | None = None
        self._stub: Any = None
        self._metrics = RelayMetrics.for_registry(registry)
        self._observer = observer
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backlog_due = 0.0
        self.relayed = 0
        """Rows this relay had acknowledged and deleted."""
        self.failed = 0
        """Rows this relay moved aside as refused for good."""

    def check(self) -> None:
        """Connects to the application's database and finds the outbox table there.

        Raises:
            OutboxDatabaseError: The database cannot be reached, or has no such table.
        """
        try:
            with self._engine.connect() as conn:
                found = inspect(conn).has_table(self.table.name, schema=self.table.schema)
        except sa_exc.DBAPIError as exc:
            url = self._engine.url.render_as_string(hide_password=True)
            raise OutboxDatabaseError(
                f"cannot reach the application database {url}: {_first_line(exc)}"
            ) from None
        if not found:
            raise OutboxDatabaseError(
                f"the application database has no table {self.table.name!r}: create it in your migrations "
                "(worker_sdk.outbox.alembic.create_outbox_table, or the worker_sdk.outbox.django app)"
            )

    def run_once(self) -> int:
        """Relays one batch; returns the rows it handled (relayed or moved aside), 0
        when none was pending. Passing failures are raised (``CoordinatorUnavailable``,
        SQLAlchemy's ``OperationalError``); the batch's rows then wait."""
        with self._engine.begin() as conn:
            rows = take_batch(conn, self.table, self.config.batch_size)
            if not rows:
                return 0
            jobs: list[tuple[PendingRow, job_service_pb2.NewJob]] = []
            failed = 0
            for row in rows:
                try:
                    jobs.append((row, decode_job(row.job)))
                except Exception as exc:  # protobuf's DecodeError: bytes no writer of ours made
                    self._move_aside(conn, row, f"the row holds no job: {exc}")
                    failed += 1
            relayed = self._send_batch(conn, jobs) if jobs else 0
        failed += len(jobs) - relayed
        self.relayed += relayed
        self.failed += failed
        self._metrics.relayed.labels(self.table.name).inc(relayed)
        self._metrics.failed.labels(self.table.name).inc(failed)
        return len(rows)

    def _send_batch(self, conn: Connection, jobs: Sequence[tuple[PendingRow, job_service_pb2.NewJob]]) -> int:
        """Sends the jobs and deletes their rows; returns how many were relayed (the
        others were moved aside)."""
        self._observe("before_send")
        try:
            self._send([job for _, job in jobs])
        except PERMANENT as error:
            if len(jobs) == 1:
                row, job = jobs[0]
                if error.reason == "JOB_ID_TAKEN" and self._sent_before(job):
                    delete_rows(conn, self.table, [row.id])
                    return 1
                self._move_aside(conn, row, _refusal(error))
                return 0
            # One bad job refuses the whole call: send one by one to set it apart.
            return sum(self._send_batch(conn, [entry]) for entry in jobs)
        self._observe("after_ack")
        delete_rows(conn, self.table, [row.id for row, _ in jobs])
        return len(jobs)

    def _sent_before(self, job: job_service_pb2.NewJob) -> bool:
        """Whether the job with the row's chosen ID is the row's own, enqueued by an
        earlier send whose answer was lost: the coordinator checks a chosen ID before the
        idempotency key, so that resend is refused as JOB_ID_TAKEN. Reading the job
        needs the ``read`` scope; without it the row is moved aside, saying so."""
        try:
            with translated_rpc_errors():
                found = self._stub.GetJob(
                    job_service_pb2.GetJobRequest(id=job.id),
                    metadata=self._connection.metadata,
                    timeout=self.config.rpc_timeout_s,
                )
        except JobNotFound:  # removed since (retention): it cannot be told apart
            return False
        except PermissionDenied:
            _log.error(
                "outbox relay: cannot tell whether job %s is this row's: give the token `read` too", job.id
            )
            return False
        return bool(found.job.idempotency_key == job.idempotency_key and found.job.queue == job.queue)

    def _send(self, jobs: Sequence[job_service_pb2.NewJob]) -> None:
        if self._stub is None:
            self._channel = self._connection.open_channel()
            self._stub = job_service_pb2_grpc.JobServiceStub(self._channel)
        request = job_service_pb2.EnqueueRequest(jobs=jobs)
        with translated_rpc_errors():
            response = self._stub.Enqueue(
                request, metadata=self._connection.metadata, timeout=self.config.rpc_timeout_s
            )
        if len(response.jobs) != len(jobs):
            raise RunwickError(f"coordinator answered {len(response.jobs)} jobs for {len(jobs)} sent")

    def _move_aside(self, conn: Connection, row: PendingRow, error: str) -> None:
        _log.error("outbox relay: row %d refused for good, moved aside: %s", row.id, error)
        move_aside(conn, self.table, row.id, error, time.time_ns() // 1_000_000)
        self._observe("moved_aside")

    def _observe(self, step: str) -> None:
        if self._observer is not None:
            self._observer(step)

    def refresh_backlog(self) -> None:
        """Sets the pending-rows and oldest-age gauges from the table."""
        with self._engine.connect() as conn:
            waiting = backlog(conn, self.table)
        self._metrics.pending.labels(self.table.name).set(waiting.pending)
        oldest = waiting.oldest_created_at_ms
        age_s = 0.0 if oldest is None else max(time.time() - oldest / 1000, 0.0)
        self._metrics.oldest_age.labels(self.table.name).set(age_s)

    def run(self) -> None:
        """Relays until ``stop()``: batches while rows wait, then sleeps until a
        notification (PostgreSQL) or the poll interval, backing off after failures."""
        wakeup: Wakeup | None = None
        backoff_s = self.config.backoff_initial_s
        failing = False
        try:
            while not self._stop.is_set():
                try:
                    if wakeup is None and self.config.listen:
                        wakeup = wakeup_for(self._engine, self.config.notify_channel, self._stop)
                    handled = self.run_once()
                    self._refresh_backlog_when_due()
                except Exception as exc:  # the rows wait; an embedded relay must not die
                    if not isinstance(exc, PASSING):
                        _log.exception("outbox relay: unexpected failure; rows wait, will retry with backoff")
                    elif not failing:
                        _log.warning("outbox relay: rows wait, will retry with backoff: %s", _first_line(exc))
                    failing = True
                    self._metrics.send_errors.labels(self.table.name).inc()
                    self._stop.wait(backoff_s)
                    backoff_s = self.config.next_backoff(backoff_s)
                    continue
                if failing:
                    _log.warning("outbox relay: relaying again")
                failing, backoff_s = False, self.config.backoff_initial_s
                if handled < self.config.batch_size:
                    if wakeup is None:
                        self._stop.wait(self.config.poll_interval_s)
                    else:
                        wakeup.wait(self.config.poll_interval_s)
        finally:
            if wakeup is not None:
                wakeup.close()

    def _refresh_backlog_when_due(self) -> None:
        now = time.monotonic()
        if now >= self._backlog_due:
            self._backlog_due = now + self.config.backlog_interval_s
            self.refresh_backlog()

    def start(self) -> None:
        """Runs the relay on a daemon thread of its own; ``stop()`` ends it."""
        if self._thread is not None:
            raise RuntimeError("this relay was started already")
        self._thread = threading.Thread(target=self.run, name=f"outbox-relay-{self.table.name}", daemon=True)
        self._thread.start()

    def request_stop(self) -> None:
        """Asks ``run()`` to end after the batch in hand (safe from a signal handler)."""
        self._stop.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ends ``run()`` after the batch in hand (its transaction commits or rolls
        back), waits for the thread up to ``timeout_s``, and closes the connections."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.close()

    def close(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            channel.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.stop)


def _engine(url: str) -> Engine:
    if not isinstance(url, str) or not url:
        raise ArgumentError(f"the application database must be a SQLAlchemy URL or Engine, got {url!r}")
    try:
        # No pre-ping: it would cost a round trip per batch. A connection the database
        # dropped fails its batch once; the pool then discards it and the retry reconnects.
        return create_engine(url)
    except sa_exc.NoSuchModuleError as exc:
        raise ArgumentError(f"not a usable database URL: {_first_line(exc)}") from None
    except sa_exc.ArgumentError:
        # The parser's message repeats the whole string, password included: say less.
        raise ArgumentError(
            "not a SQLAlchemy database URL: expected dialect+driver://user:password@host/database "
            "or sqlite:///path"
        ) from None
    except ModuleNotFoundError as exc:
        raise ArgumentError(f"the database URL's driver is not installed: {exc.name}") from None


def _refusal(error: RunwickError) -> str:
    status = error.status_code.name if error.status_code is not None else "refused"
    reason = f" ({error.reason})" if error.reason else ""
    return f"{status}{reason}: {error}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
