"""``runwick bench``: no-op jobs end to end, throughput and enqueue-to-start latency.

Starts a coordinator process and worker processes on this machine, enqueues the jobs
in batches from this process, and reads the timings back from the database, so what
is measured is the whole path: enqueue RPC, store, dispatch, stream, start, result.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the server's dependencies load only when a bench runs
    from coordinator.store import Store

_READY_LINE = "runwick coordinator listening on "


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


def add_bench_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser("bench", help="measure no-op job throughput and latency on this machine")
    bench.add_argument("--jobs", type=int, default=5_000)
    bench.add_argument("--workers", type=int, default=2, help="worker processes")
    bench.add_argument("--concurrency", type=int, default=64, help="handlers per worker process")
    bench.add_argument("--batch", type=int, default=500, help="jobs per enqueue call")
    bench.add_argument("--database-url", help="default: a fresh SQLite file in a temporary folder")
    bench.add_argument("--json", action="store_true")


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
    from coordinator.bench_worker import Noop
    from coordinator.store import Store
    from worker_sdk import Client, EnqueueItem

    store = Store.open(url, create=True)  # migrates PostgreSQL too: bench databases are scratch
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
                    [sys.executable, "-m", "coordinator.bench_worker", target, str(options.concurrency)],
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
        while store.count_by_state().get("succeeded", 0) < options.jobs:
            time.sleep(0.05)
        return _measure(store, options, enqueue_seconds, url)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()
        store.close()


def _await_address(server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith(_READY_LINE):
            return line[len(_READY_LINE) :].strip()
    raise RuntimeError("the coordinator exited before listening; see its log")


def _measure(store: Store, options: argparse.Namespace, enqueue_seconds: float, url: str) -> BenchResult:
    timings = store.run_timings()
    created = timings.created_at_ms
    finished_ms = timings.last_finished_at_ms or 0
    latencies = sorted(started - created[job_id] for job_id, started in timings.started_at_ms)
    total_s = (finished_ms - min(created.values())) / 1000
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    return BenchResult(
        jobs=options.jobs,
        engine="postgresql" if store.postgres else "sqlite",
        workers=options.workers,
        concurrency=options.concurrency,
        enqueue_seconds=enqueue_seconds,
        total_seconds=total_s,
        jobs_per_second=options.jobs / total_s if total_s else float("inf"),
        start_latency_p50_ms=quantiles[49],
        start_latency_p95_ms=quantiles[94],
        start_latency_p99_ms=quantiles[98],
    )
