"""How long ``runwick queues list`` takes to read its counts with a large jobs table.

Fills a scratch database (SQLite file or a PostgreSQL URL you name) with ``--jobs`` jobs
spread over ``--queues`` queues and every state, then times ``Store.queue_stats`` (the
read behind ``ListQueues`` and the queue gauges) ``--rounds`` times and prints the
median and the slowest. Speed is measured here, never asserted in the test suite.

    python benchmarks/queue_listing.py --jobs 1000000
    python benchmarks/queue_listing.py --database-url postgresql://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench_rows import job_row  # this folder's, next to the script
from sqlalchemy import create_engine, insert, text

from coordinator.domain.states import JobState
from coordinator.store import Store
from coordinator.store.schema import jobs, queue_count_deltas, queues

# Most jobs of a busy system have ended; a backlog waits; a few run.
_STATE_WEIGHTS = {
    JobState.SUCCEEDED: 80,
    JobState.FAILED: 4,
    JobState.CANCELLED: 1,
    JobState.AVAILABLE: 10,
    JobState.SCHEDULED: 3,
    JobState.WAITING: 1,
    JobState.RESERVED: 0.5,
    JobState.RUNNING: 0.5,
}


def _fill(url: str, count: int, queue_count: int, seed: int) -> None:
    rng = random.Random(seed)
    names = [f"queue-{n}" for n in range(queue_count)]
    states = list(_STATE_WEIGHTS)
    weights = list(_STATE_WEIGHTS.values())
    engine = create_engine(url)
    now = int(time.time() * 1000)
    with engine.begin() as conn:
        conn.execute(
            insert(queues),
            [{"name": n, "paused": False, "created_at_ms": now, "updated_at_ms": now} for n in names],
        )
    batch = 20_000
    for start in range(0, count, batch):
        rows = []
        for _ in range(min(batch, count - start)):
            state = rng.choices(states, weights)[0]
            rows.append(job_row(rng, now, rng.choice(names), state))
        with engine.begin() as conn:
            conn.execute(insert(jobs), rows)
    with engine.begin() as conn:
        # The rows went in by hand: count them the way the migration does, and leave a
        # second's worth of unfolded deltas, as a busy coordinator would.
        conn.execute(
            text(
                "INSERT INTO queue_counts (queue, state, count) "
                "SELECT queue, state, count(*) FROM jobs GROUP BY queue, state"
            )
        )
        deltas = [{"queue": rng.choice(names), "state": "available", "delta": 1} for _ in range(2_000)]
        conn.execute(insert(queue_count_deltas), deltas)
        conn.execute(text("ANALYZE"))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--database-url", help="a scratch PostgreSQL database (emptied first)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = options.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        store = Store.open(url, create=True)
        try:
            engine = create_engine(store.url)
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM jobs"))
                conn.execute(text("DELETE FROM queues"))
                conn.execute(text("DELETE FROM queue_counts"))
                conn.execute(text("DELETE FROM queue_count_deltas"))
            engine.dispose()
            began = time.perf_counter()
            _fill(store.url, options.jobs, options.queues, seed=1)
            filled_s = time.perf_counter() - began
            print(f"filled {options.jobs:,} jobs in {options.queues} queues in {filled_s:.0f} s")
            timings = []
            for _ in range(options.rounds):
                started = time.perf_counter()
                stats = store.queue_stats(int(time.time() * 1000))
                timings.append((time.perf_counter() - started) * 1000)
            engine_name = "postgresql" if store.postgres else "sqlite"
            total = sum(sum(s.counts.values()) for s in stats)
            print(
                f"{engine_name}: queue_stats over {len(stats)} queues ({total:,} jobs): median "
                f"{statistics.median(timings):.1f} ms, slowest {max(timings):.1f} ms"
            )
        finally:
            store.close()


if __name__ == "__main__":
    main()
