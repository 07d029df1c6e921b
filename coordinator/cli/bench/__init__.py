"""``runwick bench``: no-op jobs end to end, throughput and enqueue-to-start latency.

Starts a coordinator process (``runwick serve``) and worker processes
(``coordinator.cli.bench.worker``) on this machine, enqueues the jobs in batches from
this process with the SDK's ``Client``, and reads the timings back from the database, so
what is measured is the whole path: enqueue RPC, store, dispatch, stream, start, result.

The database is read in one place, ``_read_timings``; the scratch schema is made by
``runwick migrate``'s own function.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from coordinator.cli.serve import READY_LINE, migrate_schema


@dataclass(frozen=True)
class BenchResult:
    jobs: int
    engine: str
    workers: int
    concurrency: int
    enqueue_seconds: float
    total_seconds: float
    jobs_per_second: float
    start_latency_p50_ms: float
    start_latency_p95_ms: float
    start_latency_p99_ms: float


@dataclass(frozen=True)
class _Timings:
    """What the database says about a finished run."""

    engine: str
    """``postgresql`` or ``sqlite``."""
    created_ms: dict[str, int]
    """Each job's creation time, by job ID."""
    started_ms: list[tuple[str, int]]
    """Each started attempt's job ID and start time."""
    last_finished_ms: int


def add_bench_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="measure no-op job throughput and latency on this machine")
    bench.add_argument("--jobs", type=int, default=5_000, help="no-op jobs to run (default 5000)")
    bench.add_argument("--workers", type=int, default=2, help="worker processes")
    bench.add_argument("--concurrency", type=int, default=64, help="handlers per worker process")
    bench.add_argument("--batch", type=int, default=500, help="jobs per enqueue call")
    bench.add_argument("--database-url", help="default: a fresh SQLite file in a temporary folder")
    bench.add_argument("--json", action="store_true", help="print the result as one JSON object")


def run_bench(options: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="runwick-bench-") as tmp:
        url = options.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        result = _bench(url, options, Path(tmp))
    if options.json:
        print(json.dumps(asdict(result)))
    else:
        for name, value in asdict(result).items():
            print(f"{name:24} {value:.1f}" if isinstance(value, float) else f"{name:24} {value}")
    return 0


def _bench(url: str, options: argparse.Namespace, tmp: Path) -> BenchResult:
    from coordinator.cli.bench.worker import Noop
    from worker_sdk import Client, EnqueueItem

    migrate_schema(url)  # PostgreSQL too: bench databases are scratch
    processes: list[subprocess.Popen[str]] = []
    log = (tmp / "coordinator.log").open("w")
    try:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "coordinator.cli", "serve", "--database-url", url, "--port", "0"),
                *("--health-port", "-1", "--metrics-port", "-1"),  # no fixed ports for a bench
                "--insecure",  # loopback only: the bench's clients and workers send no token
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "RUNWICK_LOG_LEVEL": "WARNING"},
        )
        processes.append(server)
        target = _await_address(server)
        for _ in range(options.workers):
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "coordinator.cli.bench.worker", target, str(options.concurrency)],
                    stdout=log,
                    stderr=log,
                    text=True,
                )
            )
        time.sleep(2.0)  # let the workers connect before the clock starts
        with Client(target) as client:
            began = time.perf_counter()
            for start in range(0, options.jobs, options.batch):
                count = min(options.batch, options.jobs - start)
                client.enqueue_many([EnqueueItem(Noop(n)) for n in range(start, start + count)])
            enqueue_seconds = time.perf_counter() - began
        return _measure(_read_timings(url, options.jobs), options, enqueue_seconds)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()


def _await_address(server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith(READY_LINE):
            return line[len(READY_LINE) :].strip()
    raise RuntimeError("the coordinator exited before listening; see its log")


def _read_timings(database_url: str, jobs: int) -> _Timings:
    """Waits until ``jobs`` jobs succeeded, then reads their timings from the database.

    The bench's only access to the database, through the facade's scratch store.
    """
    from coordinator.app import open_scratch_store

    store = open_scratch_store(database_url)
    try:
        while store.count_by_state().get("succeeded", 0) < jobs:
            time.sleep(0.05)
        timings = store.run_timings()
        return _Timings(
            engine="postgresql" if store.postgres else "sqlite",
            created_ms=timings.created_at_ms,
            started_ms=timings.started_at_ms,
            last_finished_ms=timings.last_finished_at_ms or 0,
        )
    finally:
        store.close()


def _measure(timings: _Timings, options: argparse.Namespace, enqueue_seconds: float) -> BenchResult:
    created = timings.created_ms
    latencies = sorted(started - created[job_id] for job_id, started in timings.started_ms)
    total_s = (timings.last_finished_ms - min(created.values())) / 1000
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    return BenchResult(
        jobs=options.jobs,
        engine=timings.engine,
        workers=options.workers,
        concurrency=options.concurrency,
        enqueue_seconds=enqueue_seconds,
        total_seconds=total_s,
        jobs_per_second=options.jobs / total_s if total_s else float("inf"),
        start_latency_p50_ms=quantiles[49],
        start_latency_p95_ms=quantiles[94],
        start_latency_p99_ms=quantiles[98],
    )
