"""The worker process of ``runwick bench``: one no-op job type.

Run as ``python -m coordinator.cli.bench.worker TARGET CONCURRENCY``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from worker_sdk import JobContext, Worker, job


@job("bench.noop")
@dataclass
class Noop:
    n: int


def build_worker(target: str, concurrency: int) -> Worker:
    worker = Worker(target, concurrency=concurrency)

    @worker.handler(Noop)
    async def noop(payload: Noop, ctx: JobContext) -> None:
        return None

    return worker


if __name__ == "__main__":
    build_worker(sys.argv[1], int(sys.argv[2])).run()
