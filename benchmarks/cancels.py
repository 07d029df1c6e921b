"""Single-job cancels a second through the real gRPC server on port 0: ``--clients``
clients, each cancelling its share of ``--jobs`` available jobs one call at a time, each
call sent as soon as the last was answered. Prints cancels a second and the calls' p50
and p99 for each of ``--rounds`` rounds. A cancel is an item of the writer's batch
(docs/durability.md), so concurrent cancels share a transaction; the script uses only
the public client, so it runs unchanged on a tree where each cancel had a transaction of
its own, for an A/B. Speed is measured here, never asserted in the test suite.

    PYTHONPATH=. python benchmarks/cancels.py                    # SQLite in a temporary folder
    PYTHONPATH=. python benchmarks/cancels.py --postgres-url postgresql://postgres@127.0.0.1/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from coordinator.config import CoordinatorConfig
from coordinator.process import start_coordinator
from coordinator.store import Store
from worker_sdk import AsyncClient, job

ENQUEUE_CALL = 500
"""Jobs enqueued a call while the round is set up."""


@job("bench.cancelled", queue="bench-cancels")
@dataclass
class Doomed:
    n: int


@contextmanager
def scratch_database(postgres_url: str | None) -> Iterator[str]:
    """A migrated, empty database: SQLite in a temporary folder, or a PostgreSQL database
    created next to ``postgres_url``'s and dropped afterwards."""
    with tempfile.TemporaryDirectory() as folder:
        if postgres_url is None:
            url = f"sqlite:///{Path(folder) / 'cancels.db'}"
            Store.open(url, create=True).close()
            yield url
            return
        name = f"runwick_cancels_{uuid.uuid4().hex[:12]}"
        admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            url = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
            Store.open(url, create=True).close()
            yield url
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()


async def one_round(target: str, jobs: int, clients: int) -> tuple[float, list[float]]:
    """Seconds for every cancel, and each call's milliseconds."""
    async with AsyncClient(target) as setup:
        ids: list[str] = []
        while len(ids) < jobs:
            batch = [Doomed(n) for n in range(len(ids), min(len(ids) + ENQUEUE_CALL, jobs))]
            ids += await setup.enqueue_many(batch)
    latencies: list[float] = []

    async def cancel_share(share: list[str]) -> None:
        async with AsyncClient(target) as client:
            for job_id in share:
                began = time.perf_counter()
                info = await client.cancel(job_id)
                latencies.append((time.perf_counter() - began) * 1000)
                assert info.state.value == "cancelled", info

    began = time.perf_counter()
    await asyncio.gather(*(cancel_share(ids[at::clients]) for at in range(clients)))
    return time.perf_counter() - began, latencies


async def run(options: argparse.Namespace, url: str) -> None:
    config = CoordinatorConfig(database_url=url, port=0)
    running = await start_coordinator(config)
    try:
        for number in range(1, options.rounds + 1):
            seconds, latencies = await one_round(running.target, options.jobs, options.clients)
            cuts = statistics.quantiles(latencies, n=100)
            print(
                f"round {number}: {options.jobs / seconds:8.0f} cancels/s, "
                f"p50 {cuts[49]:6.2f} ms, p99 {cuts[98]:6.2f} ms "
                f"({options.jobs} jobs, {options.clients} clients)"
            )
    finally:
        await running.stop(grace_s=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", help="PostgreSQL to make a scratch database on (default: SQLite)")
    parser.add_argument("--jobs", type=int, default=2_000, help="jobs cancelled a round")
    parser.add_argument("--clients", type=int, default=32, help="clients cancelling at once")
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with scratch_database(options.postgres_url) as url:
        asyncio.run(run(options, url))


if __name__ == "__main__":
    main()
