"""Due jobs: scheduled jobs whose run-at has come become ``available``, so states read
truthfully and the dispatcher hears that work is there."""

from __future__ import annotations

from collections.abc import Callable

from coordinator.scheduler.loop import Cadence, WritePass
from coordinator.service.batch import WorkerOps
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors


def due_promotion(
    ops: WorkerOps, executors: Executors, on_effects: Callable[[Effects], None], cadence: Cadence
) -> WritePass:
    return WritePass(ops.promote_due, executors, on_effects, cadence, "due-job promotion")
