"""CPU per job of the coordinator's store path alone: no gRPC, no streams, no workers.

Runs the writes a job goes through in the coordinator (``WorkerOps.process`` of a batch
with the enqueue call as its item and the claim, then of the start, and of the result
with the next claim) on a scratch database, in three ways:

- **light**: one job at a time, one job per transaction, as at a light load (three write
  transactions a job);
- **batched**: ``--batch`` jobs per transaction, as under load (enqueue; then claim,
  start and result each for the whole batch);
- **wide**: one job at a time, claimed by a worker whose claim names the most queues and
  wire names a Hello may (``StreamBounds``), the job in one of those queues: what a claim
  costs when it asks for much more than holds work.

It prints the user and system CPU this thread spent per job, and the wall time. The
figures isolate what the store and the service layer cost, which ``runwick bench`` mixes
with gRPC, the event loop and the workers. Speed is measured here, never asserted in the
test suite.

    python benchmarks/store_path.py                       # SQLite in a temporary folder
    python benchmarks/store_path.py --database-url postgresql://postgres@127.0.0.1/bench   # emptied first
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, text

from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import STREAM_BOUNDS
from coordinator.domain.clock import SystemClock
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.states import Outcome
from coordinator.service.batch import WorkerOps
from coordinator.service.jobs import JobsService
from coordinator.service.work import AttemptMessage, ClaimRequest, EnqueueItem, ResultReport, WorkBatch
from coordinator.store import Store
from coordinator.store.schema import metadata

WIRE = "bench.noop"
QUEUE = "bench-store-path"
WORKER = WorkerIdentity("bench-worker")


class StorePath:
    def __init__(self, store: Store) -> None:
        clock, config = SystemClock(), CoordinatorConfig()
        self.jobs = JobsService(store, clock, config, random.Random(1))
        self.ops = WorkerOps(store, clock, config, random.Random(1))

    def _claim(self, count: int) -> ClaimRequest:
        return ClaimRequest(WORKER.worker_id, (QUEUE,), (WIRE,), count, 60_000)

    def light(self, jobs: int) -> None:
        for _ in range(jobs):
            item = EnqueueItem([NewJobSpec(WIRE, b"{}", queue=QUEUE)])
            answers = self.ops.process(WorkBatch(enqueues=[item], claims=[self._claim(1)]))
            attempt_id = answers.claims[0][0].attempt_id
            self.ops.process(WorkBatch(starts=[AttemptMessage(attempt_id, WORKER)]))
            result = ResultReport(attempt_id, Report(Outcome.SUCCEEDED), None, WORKER)
            self.ops.process(WorkBatch(results=[result], claims=[self._claim(1)]))

    def wide(self, jobs: int) -> None:
        queues = tuple(f"{QUEUE}-{n}" for n in range(STREAM_BOUNDS.max_hello_queues))
        names = (WIRE, *(f"{WIRE}.{n}" for n in range(STREAM_BOUNDS.max_hello_wire_names - 1)))
        wide = ClaimRequest(WORKER.worker_id, queues, names, 1, 60_000)
        for _ in range(jobs):
            self.jobs.enqueue([NewJobSpec(WIRE, b"{}", queue=queues[len(queues) // 2])])
            attempt_id = self.ops.process(WorkBatch(claims=[wide])).claims[0][0].attempt_id
            self.ops.process(WorkBatch(starts=[AttemptMessage(attempt_id, WORKER)]))
            result = ResultReport(attempt_id, Report(Outcome.SUCCEEDED), None, WORKER)
            self.ops.process(WorkBatch(results=[result]))

    def batched(self, jobs: int, batch: int) -> None:
        for _ in range(jobs // batch):
            item = EnqueueItem([NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(batch)])
            self.ops.process(WorkBatch(enqueues=[item]))
            claimed = self.ops.process(WorkBatch(claims=[self._claim(batch)])).claims[0]
            self.ops.process(WorkBatch(starts=[AttemptMessage(c.attempt_id, WORKER) for c in claimed]))
            results = [ResultReport(c.attempt_id, Report(Outcome.SUCCEEDED), None, WORKER) for c in claimed]
            self.ops.process(WorkBatch(results=results))


def measure(run: Callable[[int], None], jobs: int) -> str:
    run(max(jobs // 10, 1))  # warm: statements compiled, caches filled
    before, started = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter()
    run(jobs)
    after, wall = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter() - started
    user, system = (after.ru_utime - before.ru_utime), (after.ru_stime - before.ru_stime)
    return (
        f"user {user / jobs * 1e3:.3f}  system {system / jobs * 1e3:.3f}  "
        f"wall {wall / jobs * 1e3:.3f} ms per job ({jobs} jobs)"
    )


def _emptied(store: Store) -> None:
    """A PostgreSQL database the user named loses its Runwick rows (migrated first, so
    only Runwick's own tables are touched), as benchmarks/dashboard.py empties it."""
    engine = create_engine(store.url)
    with engine.begin() as conn:
        # The audit log refuses TRUNCATE; lifted inside this transaction only.
        conn.execute(text("ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_truncate"))
        conn.execute(text(f"TRUNCATE {', '.join(table.name for table in metadata.sorted_tables)}"))
        conn.execute(text("ALTER TABLE audit_events ENABLE TRIGGER audit_events_no_truncate"))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="a scratch PostgreSQL database (emptied first)")
    parser.add_argument("--light-jobs", type=int, default=500, help="0 skips the light way")
    parser.add_argument("--batched-jobs", type=int, default=5_120, help="0 skips the batched way")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--wide-jobs", type=int, default=200, help="0 skips the wide way")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store.open(options.database_url or f"sqlite:///{Path(folder) / 'store.db'}", create=True)
        try:
            if store.postgres:
                _emptied(store)
            path = StorePath(store)
            if options.light_jobs > 0:  # 0 skips a way
                print(f"light    {measure(path.light, options.light_jobs)}")
            if options.batched_jobs > 0:
                print(f"batched  {measure(lambda n: path.batched(n, options.batch), options.batched_jobs)}")
            if options.wide_jobs > 0:
                print(f"wide     {measure(path.wide, options.wide_jobs)}")
        finally:
            store.close()


if __name__ == "__main__":
    main()
