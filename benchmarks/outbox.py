"""Commit-to-enqueued latency of the outbox on PostgreSQL, woken by LISTEN/NOTIFY.

Starts a coordinator (``runwick serve``) and a relay (``runwick outbox relay``) as
processes of their own, each on a scratch PostgreSQL database of the server you name,
then commits ``--rows`` jobs one transaction at a time, ``--gap-ms`` apart (so each is
measured on an idle relay: latency, not throughput). For each job, the latency is from
just before its ``COMMIT`` to the coordinator's ``created_at`` of the job (the same
host's clock, whole milliseconds, stamped in the enqueue's transaction). Prints p50, p90,
p99 and the slowest. Speed is measured here, never asserted in the test suite.

    PYTHONPATH=. python benchmarks/outbox.py
    PYTHONPATH=. python benchmarks/outbox.py --rows 500 \
        --admin-url postgresql+psycopg://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url

from worker_sdk import AsyncClient, job
from worker_sdk.outbox import Outbox

ROOT = Path(__file__).resolve().parents[1]


@job("bench.outbox.ping")
@dataclass
class Ping:
    n: int


def _scratch_database(admin_url: str, prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def _drop_database(admin_url: str, url: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    admin.dispose()


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "coordinator.cli", *args], cwd=ROOT, env=env, stdout=out, stderr=out
        )


def _wait_for(log: Path, text_: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if text_ in line:
                return line
        time.sleep(0.05)
    raise SystemExit(f"not seen in {log} within {timeout_s} s: {text_!r}\n{log.read_text()[-2000:]}")


def _create_outbox(app_url: str) -> None:
    engine = create_engine(app_url)
    Outbox().table.create(engine)
    engine.dispose()


def _commit_rows(
    app_url: str, rows: int, gap_s: float, watch_deletes: bool
) -> tuple[dict[str, float], list[float]]:
    """Commits one job per transaction. Returns each job's key with the time just before
    its COMMIT (epoch seconds), and with ``watch_deletes`` for each the milliseconds
    until its row was gone (the relay's delete, after the acknowledgement, committed),
    looked for every 1 ms (which loads a small machine and slows what it measures)."""
    outbox = Outbox()
    table = outbox.table
    engine = create_engine(app_url)
    started: dict[str, float] = {}
    gone_ms: list[float] = []
    with engine.connect() as watcher:
        watcher.execution_options(isolation_level="AUTOCOMMIT")
        for n in range(rows):
            with engine.connect() as conn:
                conn.begin()
                (key,) = outbox.enqueue_many(conn, [Ping(n)])
                started[key] = time.time()
                begun = time.perf_counter()
                conn.commit()
            if watch_deletes:
                present = select(table.c.id).where(table.c.idempotency_key == key)
                while watcher.execute(present).first() is not None:
                    time.sleep(0.001)
                gone_ms.append((time.perf_counter() - begun) * 1000)
            time.sleep(gap_s)
    engine.dispose()
    return started, gone_ms


async def _created_at(target: str, keys: set[str]) -> dict[str, float]:
    async with AsyncClient(target) as client:
        found: dict[str, float] = {}
        for _ in range(200):
            found = {
                job.idempotency_key: job.created_at.timestamp()
                async for job in client.list_jobs(wire_name="bench.outbox.ping")
                if job.idempotency_key in keys and job.created_at is not None
            }
            if len(found) == len(keys):
                return found
            await asyncio.sleep(0.1)
        raise SystemExit(f"only {len(found)} of {len(keys)} jobs reached the coordinator")


def _report(what: str, latencies_ms: list[float]) -> None:
    ordered = sorted(latencies_ms)
    cuts = statistics.quantiles(ordered, n=100)
    print(
        f"{what}, {len(ordered)} jobs (PostgreSQL, NOTIFY): p50 {cuts[49]:.1f} ms, "
        f"p90 {cuts[89]:.1f} ms, p99 {cuts[98]:.1f} ms, max {ordered[-1]:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--admin-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    parser.add_argument(
        "--watch-deletes", action="store_true", help="also time each row's delete (polls every 1 ms)"
    )
    options = parser.parse_args()
    coordinator_db = _scratch_database(options.admin_url, "bench_outbox_coordinator")
    app_db = _scratch_database(options.admin_url, "bench_outbox_app")
    logs = Path(tempfile.mkdtemp(prefix="outbox-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        migrate = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "migrate", "--database-url", coordinator_db],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            check=False,
        )
        if migrate.returncode != 0:
            raise SystemExit(migrate.stderr.decode(errors="replace"))
        serve = ["serve", "--database-url", coordinator_db, "--port", "0", "--insecure"]
        serve += ["--health-port", "-1", "--metrics-port", "-1", "--dashboard-port", "-1"]
        processes.append(_start(serve, logs / "serve.log"))
        target = _wait_for(logs / "serve.log", "runwick coordinator listening on ").split()[-1]
        _create_outbox(app_db)  # before the relay checks for it
        relay = ["outbox", "relay", "--database-url", app_db, "--target", target, "--poll-interval", "5"]
        processes.append(_start(relay, logs / "relay.log"))
        _wait_for(logs / "relay.log", "relaying table")
        time.sleep(1)  # the relay has looked once and listens
        started, gone_ms = _commit_rows(app_db, options.rows, options.gap_ms / 1000, options.watch_deletes)
        created = asyncio.run(_created_at(target, set(started)))
        _report("commit to the job's created_at", [(created[key] - started[key]) * 1000 for key in started])
        if gone_ms:
            _report("commit to its row deleted after the ack (looked for every 1 ms)", gone_ms)
    finally:
        for process in processes:
            process.terminate()
            process.wait(30)
        _drop_database(options.admin_url, coordinator_db)
        _drop_database(options.admin_url, app_db)


if __name__ == "__main__":
    main()
