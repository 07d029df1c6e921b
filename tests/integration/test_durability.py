"""Durability across a coordinator killed with kill -9 (docs/durability.md).

An acknowledgment is sent only after its transaction committed, so whatever the
coordinator acknowledged is in the database when the process dies: an enqueue, and a
result, which is then never run again. On SQLite the file a kill -9 leaves behind is
intact, and the acknowledged writes that were still only in the write-ahead log are
replayed when the database is next opened.

(A kill -9 leaves the operating system's page cache alone, so these tests show the
order of commit and acknowledgment, not the fsync behind ``synchronous``; the
documentation says what covers a power loss.)

``test_faults.py`` covers jobs in flight when the coordinator dies; these tests pin the
writes acknowledged the moment before.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import pytest

from tests.integration.rawstream import RawWorker
from tests.integration.worker_app import Echo
from tests.support import free_port, kill9, reap, serve, stop, wait_listening
from worker_sdk import AsyncClient, JobState, Outcome
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

pytestmark = pytest.mark.slow
WIRE = "tests.echo"


def _serve(database_url: str, port: int, log: Path) -> subprocess.Popen[str]:
    return serve(
        log,
        *("--database-url", database_url, "--port", str(port), "--maintenance-interval", "0.2"),
        *(
            "--health-port",
            "-1",
            "--metrics-port",
            "-1",
            "--dashboard-port",
            "-1",
        ),  # a restart reuses only the API port
        "--insecure",  # loopback only; the test's workers and clients send no token
    )


async def _acknowledge_then_kill_9(server: subprocess.Popen[str], target: str) -> tuple[str, str]:
    """Runs one job to an acknowledged success by hand, enqueues another, and kills the
    coordinator with kill -9 the moment the enqueue is acknowledged. Returns both IDs."""
    async with AsyncClient(target) as client:
        ran_id = await client.enqueue(Echo("runs once"))
        worker = RawWorker(target, "worker-before", [WIRE])
        try:
            assignment = await worker.claim()
            assert assignment.job_id == ran_id
            assert (await worker.start(assignment.attempt_id)).granted
            ack = await worker.succeed(assignment.attempt_id, b"acknowledged")
            assert ack.status == pb.ResultAck.STATUS_ACCEPTED
            waiting_id = await client.enqueue(Echo("enqueued last"))
            await kill9(server)
        finally:
            await worker.close()
    return ran_id, waiting_id


async def test_acknowledged_enqueue_and_result_survive_kill_9_and_the_result_is_not_run_again(
    database_url: str, tmp_path: Path
):
    port = free_port()
    target = f"127.0.0.1:{port}"
    log = tmp_path / "coordinator.log"
    server = _serve(database_url, port, log)
    try:
        await wait_listening(server, log)
        ran_id, waiting_id = await _acknowledge_then_kill_9(server, target)

        server = _serve(database_url, port, log)
        await wait_listening(server, log, count=2)
        async with AsyncClient(target) as client:
            ran = await client.get(ran_id)
            assert (ran.state, ran.output, ran.executions) == (JobState.SUCCEEDED, b"acknowledged", 1)
            waiting = await client.get(waiting_id)
            assert (waiting.state, waiting.executions) == (JobState.AVAILABLE, 0)

            # A worker of the restarted coordinator is offered the waiting job, never the
            # one whose success was acknowledged.
            worker = RawWorker(target, "worker-after", [WIRE], capacity=2)
            try:
                assignment = await worker.claim()
                assert assignment.job_id == waiting_id
                assert (await worker.start(assignment.attempt_id)).execution_number == 1
                ack = await worker.succeed(assignment.attempt_id, b"ran after the restart")
                assert ack.status == pb.ResultAck.STATUS_ACCEPTED
            finally:
                await worker.close()

            [attempt] = await client.attempts(ran_id)
            assert (attempt.outcome, attempt.execution_number) == (Outcome.SUCCEEDED, 1)
            assert (await client.get(ran_id)).executions == 1
            assert (await client.get(waiting_id)).output == b"ran after the restart"
    finally:
        await stop(server)


def _job_rows(path: Path, job_ids: list[str]) -> dict[str, tuple[str, bytes | None]]:
    """The (state, output) of each of ``job_ids`` found in the database at ``path``."""
    with closing(sqlite3.connect(path)) as conn:
        try:
            rows = conn.execute(
                f"SELECT id, state, output FROM jobs WHERE id IN ({', '.join('?' * len(job_ids))})", job_ids
            ).fetchall()
        except sqlite3.OperationalError as error:  # the schema itself may be in the WAL only
            assert "no such table" in str(error)
            rows = []
    return {job_id: (state, output) for job_id, state, output in rows}


def _main_file_alone(db: Path, job_ids: list[str], scratch: Path) -> dict[str, tuple[str, bytes | None]]:
    """What the main database file holds by itself, read from a copy without its WAL."""
    scratch.mkdir()
    shutil.copyfile(db, scratch / db.name)
    return _job_rows(scratch / db.name, job_ids)


def _pragma(db: Path, name: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(f"PRAGMA {name}").fetchall()


async def test_sqlite_file_after_kill_9_is_intact_and_its_wal_is_replayed_on_open(tmp_path: Path):
    db = tmp_path / "runwick.db"
    wal = db.with_name(db.name + "-wal")
    port = free_port()
    log = tmp_path / "coordinator.log"
    server = _serve(f"sqlite:///{db}", port, log)
    try:
        await wait_listening(server, log)
        ran_id, waiting_id = await _acknowledge_then_kill_9(server, f"127.0.0.1:{port}")
    finally:
        reap(server)
    ids = [ran_id, waiting_id]

    # The acknowledged writes are committed in the WAL and not yet in the main file:
    # nothing checkpoints them before the process dies (WAL mode, no clean close).
    assert wal.exists() and wal.stat().st_size > 0
    alone = _main_file_alone(db, ids, tmp_path / "before")
    assert waiting_id not in alone and alone.get(ran_id) != ("succeeded", b"acknowledged")

    # Opened again, the database is intact and shows every acknowledged write.
    assert _pragma(db, "integrity_check") == [("ok",)]
    assert _job_rows(db, ids) == {ran_id: ("succeeded", b"acknowledged"), waiting_id: ("available", None)}
    assert _pragma(db, "journal_mode") == [("wal",)]  # kept in the file

    # The last connection's close checkpointed the WAL into the main file.
    assert not wal.exists() or wal.stat().st_size == 0
    assert _main_file_alone(db, ids, tmp_path / "after") == {
        ran_id: ("succeeded", b"acknowledged"),
        waiting_id: ("available", None),
    }
    assert _pragma(db, "integrity_check") == [("ok",)]
