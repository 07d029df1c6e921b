"""CPU per job of a batch enqueue's Python outside the database: the SDK building the
request from ``@job`` dataclasses (``Client.enqueue_many``'s encoding), then the
coordinator's ``JobServicer.Enqueue`` decoding it, checking every job into its record
(``JobsService``'s checks, which run on the writer before the transaction) and building
the answer. No gRPC transport, no database: what a producer enqueuing 500 jobs a call
waits for besides the insert itself.

    python benchmarks/enqueue_request.py              # 500 jobs a request, 200 requests
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from coordinator.api.auth import acting_as
from coordinator.api.job_servicer import JobServicer
from coordinator.config import CoordinatorConfig
from coordinator.domain.access import ANONYMOUS
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.clock import SystemClock
from coordinator.domain.records import Enqueued, NewJobSpec
from coordinator.service.jobs import JobsService
from worker_sdk import Client, job
from worker_sdk.proto.runwick.v1 import job_service_pb2


@job("bench.noop")
@dataclass
class Noop:
    i: int
    t: float


class CheckingApp:
    """The facade's part of an enqueue without the store: every job checked into its
    record as ``JobsService.enqueue`` does before its transaction."""

    def __init__(self) -> None:
        self.clock = SystemClock()
        store: Any = SimpleNamespace(bounds=StoreBounds())  # the checks read the bounds alone
        self.jobs = JobsService(store, self.clock, CoordinatorConfig(), random.Random(1))

    async def enqueue(
        self, specs: Sequence[NewJobSpec], reachable: frozenset[str] | None = None
    ) -> list[Enqueued]:
        batch, _ = self.jobs.checked_batch(list(specs), self.clock.now_ms(), reachable)
        return [Enqueued(new.record.id, new.record.state, False) for new in batch]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500, help="jobs a request")
    parser.add_argument("--requests", type=int, default=200)
    options = parser.parse_args()
    client = Client("127.0.0.1:1")  # the channel connects lazily: nothing is sent
    servicer = JobServicer(CheckingApp())  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    payloads = [Noop(i, 0.5) for i in range(options.jobs)]
    built = decoded = 0.0
    for round_ in range(options.requests + 1):  # the first round warms up, unmeasured
        started = time.process_time()
        wire = client._enqueue_request(payloads).SerializeToString()
        halfway = time.process_time()
        request = job_service_pb2.EnqueueRequest.FromString(wire)
        with acting_as(ANONYMOUS):  # as the auth interceptor runs a call with auth off
            response = loop.run_until_complete(servicer.Enqueue(request, None))  # type: ignore[arg-type]
        ended = time.process_time()
        # Every job answered, each with its own ID (the figures mean nothing otherwise).
        if len({answered.id for answered in response.jobs}) != options.jobs:
            raise SystemExit(f"answered {len(response.jobs)} jobs for {options.jobs}")
        if round_:
            built += halfway - started
            decoded += ended - halfway
    loop.close()
    client.close()
    jobs = options.jobs * options.requests
    print(
        f"SDK request {built / jobs * 1e6:.2f} µs, coordinator decode+check+answer "
        f"{decoded / jobs * 1e6:.2f} µs of CPU per job ({jobs} jobs, {options.jobs} a request)"
    )


if __name__ == "__main__":
    main()
