"""What ``worker_sdk.testing.Coordinator`` costs a test: its start and close, and the
issue's example "retried three times with backoff, then failed" from enqueue to the
last attempt (four runs, three advances). Prints the median and the slowest of
``--rounds`` rounds. Speed is measured here, never asserted in the test suite.

    PYTHONPATH=. python benchmarks/testing_coordinator.py --rounds 20
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

from worker_sdk import JobContext, JobState, job
from worker_sdk.testing import Coordinator


@job("bench.flaky", max_executions=4)
@dataclass
class Flaky:
    order_id: str


def failing(payload: Flaky, ctx: JobContext) -> None:
    raise ConnectionError("down")


def one_round() -> tuple[float, float, float]:
    """Seconds to start, to run the retries to failure, and to close."""
    began = time.perf_counter()
    coordinator = Coordinator()
    coordinator.start()
    started = time.perf_counter()
    coordinator.handler(Flaky)(failing)
    job_id = coordinator.client.enqueue(Flaky("o-1"))
    coordinator.run_until_idle()
    for _ in range(3):
        [*_, last] = coordinator.attempts(job_id)
        assert last.retry_delay is not None
        coordinator.advance(last.retry_delay)
        coordinator.run_until_idle()
    assert coordinator.job(job_id).state is JobState.FAILED
    ran = time.perf_counter()
    coordinator.close()
    return started - began, ran - started, time.perf_counter() - ran


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=10, help="rounds to time (the first is left out)")
    args = parser.parse_args()
    one_round()  # the first start also migrates the per-process template database
    rounds = [one_round() for _ in range(args.rounds)]
    for index, what in enumerate(("start", "retries to failure", "close")):
        times = [r[index] * 1000 for r in rounds]
        print(f"{what:>20}: median {statistics.median(times):7.1f} ms, slowest {max(times):7.1f} ms")


if __name__ == "__main__":
    main()
