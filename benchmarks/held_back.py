"""What the held-back reads cost (docs/metrics.md, "Held-back jobs"): a queue with a deep
backlog over many concurrency keys, read by the stats loop and the KEDA scaler.

Fills a scratch database (SQLite file or a PostgreSQL URL you name) with ``--jobs``
available jobs of one queue spread over ``--keys`` keys, ``--leased`` of them reserved or
running, plus as many ended jobs, then times, in alternating rounds:

- ``free``: ``Store.slot_demand`` of the queue without controls (two capped counts);
- ``keyed``: the same with a per-key limit and a per-key rate (plus the one grouped
  read over up to 100,000 due jobs, ``store.backlog``);
- ``due1``: the keyed queue's due jobs with a cap of 1 (the SDK's idle check: a first
  walk of 1,000 due jobs);
- ``active``: the keyed queue's ``IsActive`` read (cap 1; a leased job answers alone);
- ``stats``: ``read_queue_stats``, the stats loop's whole read, on the keyed queue
  (its walk of ``held_back_walked_jobs``, 10,000); ``stats100k``: the same walking
  100,000.

Prints the median and the slowest of each. Speed is measured here, never asserted.

    python benchmarks/held_back.py --jobs 200000 --keys 10000
    python benchmarks/held_back.py --database-url postgresql://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_rows import job_row  # this folder's, next to the script
from sqlalchemy import create_engine, insert, text

from coordinator.domain.clock import SystemClock
from coordinator.domain.demand import DemandTarget
from coordinator.domain.states import JobState
from coordinator.scheduler.stats import read_queue_stats
from coordinator.store import Store
from coordinator.store.schema import jobs, queues

QUEUE = "keyed"
SCAN = 100_000


def _row(rng: random.Random, now: int, state: JobState, key: str) -> dict[str, Any]:
    leased = state in (JobState.RESERVED, JobState.RUNNING)
    return job_row(rng, now, QUEUE, state, concurrency_key=key, worker_id="bench-worker" if leased else None)


def _fill(url: str, count: int, keys: int, leased: int) -> None:
    rng = random.Random(1)
    engine = create_engine(url)
    now = int(time.time() * 1000)
    with engine.begin() as conn:
        for table in ("jobs", "queues", "queue_counts", "queue_count_deltas", "queue_rate_slots"):
            conn.execute(text(f"DELETE FROM {table}"))
        conn.execute(
            insert(queues), [{"name": QUEUE, "paused": False, "created_at_ms": now, "updated_at_ms": now}]
        )
    plan = [(JobState.AVAILABLE, count), (JobState.SUCCEEDED, count), (JobState.RUNNING, leased)]
    for state, n in plan:
        for start in range(0, n, 20_000):
            rows = [
                _row(rng, now, state, f"tenant:{rng.randrange(keys)}") for _ in range(min(20_000, n - start))
            ]
            with engine.begin() as conn:
                conn.execute(insert(jobs), rows)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO queue_counts (queue, state, count) "
                "SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"
            )
        )
        conn.execute(text("ANALYZE"))
    engine.dispose()


def _controls(url: str, keyed: bool) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        values = (
            "key_limit = 2, rate_count = 5, rate_period_ms = 60000, rate_per_key = true"
            if keyed
            else ("key_limit = NULL, rate_count = NULL, rate_period_ms = NULL, rate_per_key = false")
        )
        conn.execute(text(f"UPDATE queues SET {values} WHERE name = :q"), {"q": QUEUE})
    engine.dispose()


def _time(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--leased", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--database-url", help="a scratch PostgreSQL database (emptied first)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = options.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        store = Store.open(url, create=True)
        try:
            _fill(store.url, options.jobs, options.keys, options.leased)
            clock = SystemClock()
            target = DemandTarget(QUEUE)
            timings: dict[str, list[float]] = {
                "free": [],
                "keyed": [],
                "due1": [],
                "active": [],
                "stats": [],
                "stats100k": [],
            }
            for _ in range(options.rounds):
                _controls(store.url, keyed=False)
                timings["free"].append(_time(lambda: store.slot_demand(target, clock.now_ms(), SCAN, SCAN)))
                _controls(store.url, keyed=True)
                timings["keyed"].append(_time(lambda: store.slot_demand(target, clock.now_ms(), SCAN, SCAN)))
                timings["due1"].append(_time(lambda: store.slot_demand(target, clock.now_ms(), 1, SCAN)))
                timings["active"].append(
                    _time(lambda: store.slot_demand(target, clock.now_ms(), 1, SCAN, leased_enough=True))
                )
                timings["stats"].append(_time(lambda: read_queue_stats(store, clock)))
                timings["stats100k"].append(_time(lambda: read_queue_stats(store, clock, SCAN)))
            demand = store.slot_demand(target, clock.now_ms(), SCAN, SCAN)
            held = read_queue_stats(store, clock)[4]
            engine_name = "postgresql" if store.postgres else "sqlite"
            print(
                f"{engine_name}: {options.jobs:,} available jobs over {options.keys:,} keys, "
                f"{options.leased:,} running; demand {demand}, held {held}"
            )
            for name, values in timings.items():
                print(f"  {name:9} median {statistics.median(values):7.1f} ms, slowest {max(values):7.1f} ms")
        finally:
            store.close()


if __name__ == "__main__":
    main()
