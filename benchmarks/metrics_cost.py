"""CPU the coordinator's metrics cost per job: ``CoordinatorMetrics.observe`` for a
worker batch's effects (a start granted, then an attempt and its job ended, per job) and
``enqueued_many`` for its enqueue, on the event loop's thread. No gRPC, no database.

    python benchmarks/metrics_cost.py            # 128 jobs a batch, 2,000 batches
"""

from __future__ import annotations

import argparse
import time

from coordinator.domain.states import JobState, Outcome
from coordinator.metrics import CoordinatorMetrics
from coordinator.service.effects import AttemptEnded, Effects, RunStarted

WARM_BATCHES = 10
"""Batches run before measuring, so that every series exists."""


def batch_effects(jobs: int, queues: int) -> Effects:
    effects = Effects()
    for i in range(jobs):
        queue, wire_name = f"queue-{i % queues}", f"tasks.job_{i % 7}"
        effects.started.append(RunStarted(queue, wire_name, i % 50))
        effects.ended.append(AttemptEnded(queue, wire_name, Outcome.SUCCEEDED, JobState.SUCCEEDED, i % 20))
        effects.job_finished(f"job-{i}", queue, wire_name, JobState.SUCCEEDED)
    return effects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--queues", type=int, default=3)
    options = parser.parse_args()
    metrics = CoordinatorMetrics()
    effects = batch_effects(options.batch, options.queues)
    pairs = [(s.queue, s.wire_name) for s in effects.started]
    for _ in range(WARM_BATCHES):
        metrics.observe(effects)
        metrics.enqueued_many(pairs)
    started = time.process_time()
    for _ in range(options.batches):
        metrics.observe(effects)
        metrics.enqueued_many(pairs)
    spent = time.process_time() - started
    jobs = options.batch * options.batches
    # Every job counted once (the figures mean nothing if the counting was skipped).
    counted_jobs = jobs + WARM_BATCHES * options.batch
    for name in ("runwick_jobs_enqueued_total", "runwick_jobs_completed_total"):
        counted = sum(
            sample.value
            for family in metrics.registry.collect()
            for sample in family.samples
            if sample.name == name
        )
        if counted != counted_jobs:
            raise SystemExit(f"{name} counted {counted:.0f} jobs, not {counted_jobs}")
    print(f"{spent / jobs * 1e6:.2f} µs of CPU per job ({jobs} jobs, {options.batch} a batch)")


if __name__ == "__main__":
    main()
