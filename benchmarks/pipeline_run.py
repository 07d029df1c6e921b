"""The worker's run pipeline alone: microseconds per run of a no-op async handler with an
execution timeout (``worker_sdk._pipeline.execute``), no coordinator, no stream. For an
A/B of a change to the pipeline's timers, run it on both trees in one sitting:

    PYTHONPATH=. python benchmarks/pipeline_run.py
    PYTHONPATH=../other-tree python benchmarks/pipeline_run.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass
from datetime import timedelta

from worker_sdk import JobContext, job
from worker_sdk._jobs import encode_payload
from worker_sdk._pipeline import HandlerDef, PipelineRun, execute


@job("bench.noop")
@dataclass
class Noop:
    n: int


async def noop(payload: Noop, ctx: JobContext) -> None:
    return None


async def one_round(runs: int) -> float:
    """Microseconds per run over ``runs`` runs."""
    spec, data = encode_payload(Noop(1))
    definition = HandlerDef(spec, noop, True)
    began = time.perf_counter()
    for _ in range(runs):
        ctx = JobContext(
            job_id="j",
            attempt_id="a",
            wire_name=spec.wire_name,
            queue=spec.queue,
            execution_number=1,
            max_executions=3,
            generation=1,
        )
        run = PipelineRun(
            definition, ctx, data, spec.version, (), timedelta(seconds=30), timedelta(seconds=10), 1024, None
        )
        await execute(run)
    return (time.perf_counter() - began) / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5000, help="runs per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (the median is printed)")
    args = parser.parse_args()
    rounds = [asyncio.run(one_round(args.runs)) for _ in range(args.rounds)]
    print(f"median {statistics.median(rounds):.1f} us/run; rounds {', '.join(f'{r:.1f}' for r in rounds)}")


if __name__ == "__main__":
    main()
