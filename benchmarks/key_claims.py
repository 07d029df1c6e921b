"""What concurrency keys cost a claim, and how fair turns are on a deep backlog (issue 41),
on the store path alone: no gRPC, no streams, no worker processes.

**throughput**: three queues of one scratch database, each with the same backlog
(``--backlog`` jobs): ``plain`` (no keys), ``keys`` (spread over ``--keys`` keys, no
limit: fair turns only) and ``limit`` (the same keys and a per-key limit,
``--key-limit``). Blocks of ``--block`` jobs are claimed, started and finished from each
queue in turn (``--rounds`` times, so the three share the machine's noise), with about
two claims' worth of jobs in flight, as under load: a claim of ``--batch`` jobs, the
starts of that claim, then the results of the claim before it. It prints, per queue,
the median wall time and thread CPU (user + system: this process only, so on PostgreSQL
the server's share is in the wall time alone) per job, and each ratio against ``plain``.

**fairness**: ``--fair-a`` jobs of key A enqueued first, then ``--fair-b`` of key B, in a
queue of their own; claims of ``--batch`` jobs, each started in the order claimed and
finished at once. It prints how many A jobs started before B's last.

    python benchmarks/key_claims.py                       # SQLite in a temporary folder
    python benchmarks/key_claims.py --database-url postgresql://postgres@127.0.0.1/bench   # emptied first
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_path import _emptied

from coordinator.config import CoordinatorConfig
from coordinator.domain.access import Actor, Principal, Scope
from coordinator.domain.clock import SystemClock
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.states import Outcome
from coordinator.service.batch import WorkerOps
from coordinator.service.jobs import JobsService
from coordinator.service.queues import QueueService
from coordinator.service.work import AttemptMessage, Claimed, ClaimRequest, ResultReport, WorkBatch
from coordinator.store import Store

WIRE = "bench.noop"
WORKER = WorkerIdentity("bench-worker")
OPERATOR = Actor(Principal("0123456789abcdef", "bench", frozenset({Scope.MANAGE})), "bench")
LOAD_BATCH = 500


class KeyClaims:
    def __init__(self, store: Store, batch: int) -> None:
        clock, config = SystemClock(), CoordinatorConfig()
        self.jobs = JobsService(store, clock, config, random.Random(1))
        self.ops = WorkerOps(store, clock, config, random.Random(1))
        self.queues = QueueService(store, clock, config)
        self.batch = batch
        self.in_flight: dict[str, list[Claimed]] = {}

    def load(self, queue: str, jobs: int, keys: int, key: str = "") -> None:
        """``jobs`` jobs, over ``keys`` keys taken in turn (or all of ``key``)."""
        for start in range(0, jobs, LOAD_BATCH):
            numbers = range(start, min(start + LOAD_BATCH, jobs))
            self.jobs.enqueue(
                [
                    NewJobSpec(WIRE, b"{}", queue=queue, concurrency_key=f"k:{n % keys}" if keys else key)
                    for n in numbers
                ]
            )

    def claim(self, queue: str, count: int) -> list[Claimed]:
        request = ClaimRequest(WORKER.worker_id, (queue,), (WIRE,), count, 60_000)
        return self.ops.process(WorkBatch(claims=[request])).claims[0]

    def started(self, claimed: Sequence[Claimed]) -> None:
        self.ops.process(WorkBatch(starts=[AttemptMessage(c.attempt_id, WORKER) for c in claimed]))

    def finished(self, claimed: Sequence[Claimed]) -> None:
        results = [ResultReport(c.attempt_id, Report(Outcome.SUCCEEDED), None, WORKER) for c in claimed]
        self.ops.process(WorkBatch(results=results))

    def block(self, queue: str, jobs: int) -> tuple[float, float]:
        """Claims, starts and finishes about ``jobs`` jobs of ``queue``; wall and CPU seconds a job."""
        before, began = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter()
        done = 0
        while done < jobs:
            claimed = self.claim(queue, self.batch)
            if not claimed:
                raise SystemExit(f"{queue}: the backlog ran out; raise --backlog")
            self.started(claimed)
            self.finished(self.in_flight.get(queue, []))
            self.in_flight[queue] = claimed
            done += len(claimed)
        after, wall = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter() - began
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return wall / done, cpu / done

    def fairness(self, a_jobs: int, b_jobs: int) -> int:
        """How many A jobs start before B's last, with A's backlog enqueued first."""
        self.load("fair", a_jobs, 0, "a")
        self.jobs.enqueue([NewJobSpec(WIRE, b"{}", queue="fair", concurrency_key="b") for _ in range(b_jobs)])
        started: list[str] = []
        while started.count("b") < b_jobs:
            claimed = self.claim("fair", self.batch)
            self.started(claimed)
            self.finished(claimed)
            started += [c.job.concurrency_key for c in claimed]
        last_b = max(i for i, key in enumerate(started) if key == "b")
        return started[:last_b].count("a")


def throughput(bench: KeyClaims, options: argparse.Namespace) -> None:
    began = time.monotonic()
    bench.load("plain", options.backlog, 0)
    bench.load("keys", options.backlog, options.keys)
    bench.load("limit", options.backlog, options.keys)
    bench.queues.set_key_limit("limit", options.key_limit, OPERATOR)
    print(f"loaded 3 x {options.backlog} jobs in {time.monotonic() - began:.0f} s", flush=True)
    for queue in ("plain", "keys", "limit"):  # warm: statements compiled, caches filled
        bench.block(queue, options.block // 5)
    figures: dict[str, list[tuple[float, float]]] = {"plain": [], "keys": [], "limit": []}
    for _ in range(options.rounds):
        for queue, runs in figures.items():
            runs.append(bench.block(queue, options.block))
    plain_wall = statistics.median(w for w, _ in figures["plain"])
    plain_cpu = statistics.median(c for _, c in figures["plain"])
    for queue, runs in figures.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        print(
            f"{queue:6} wall {wall * 1e3:.3f} ms/job ({plain_wall / wall:.2f}x plain's throughput)  "
            f"cpu {cpu * 1e3:.3f} ms/job ({plain_cpu / cpu:.2f}x)  runs: "
            + " ".join(f"{w * 1e3:.3f}" for w, _ in runs)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="a scratch PostgreSQL database (emptied first)")
    parser.add_argument("--scenario", choices=("throughput", "fairness"), default="throughput")
    parser.add_argument("--backlog", type=int, default=100_000, help="jobs in each queue's backlog")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--key-limit", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="jobs a claim asks for")
    parser.add_argument("--block", type=int, default=2_560, help="jobs of one measured block")
    parser.add_argument("--rounds", type=int, default=5, help="measured blocks of each queue, alternating")
    parser.add_argument("--fair-a", type=int, default=100_000)
    parser.add_argument("--fair-b", type=int, default=10)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(options.database_url or f"sqlite:///{Path(folder) / 'store.db'}", create=True)
        try:
            if store.postgres:
                _emptied(store)
            bench = KeyClaims(store, options.batch)
            if options.scenario == "throughput":
                throughput(bench, options)
            else:
                before = bench.fairness(options.fair_a, options.fair_b)
                print(
                    f"{options.fair_a} A jobs then {options.fair_b} B jobs, claims of {options.batch}: "
                    f"{before} A jobs started before the last B job"
                )
        finally:
            store.close()


if __name__ == "__main__":
    main()
