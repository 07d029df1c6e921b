"""Due jobs: scheduled jobs whose run-at has come become ``available``, so states read
truthfully and the dispatcher hears that work is there."""

from __future__ import annotations

import functools
from collections.abc import Callable

from coordinator.domain import changes
from coordinator.scheduler.loop import Cadence, WritePass
from coordinator.service.batch import WorkerOps
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors
from coordinator.service.work import BatchAnswers
from coordinator.service.writes import JobWrites
from coordinator.store import Tx


def promote_due(ops: WorkerOps) -> BatchAnswers:
    """One pass: moves up to ``maintenance_batch`` scheduled jobs whose run-at has come
    to ``available``, in one transaction.

    Claims take due scheduled jobs directly, so this only keeps states truthful for
    readers; it also tells the dispatcher that work is there.
    """

    def promote(tx: Tx) -> BatchAnswers:
        now = ops.clock.now_ms()
        answers = BatchAnswers()
        writes = JobWrites(tx, now, answers)
        due = tx.due_scheduled(now, ops.config.maintenance_batch)
        for job in due:
            writes.change(job, changes.due(job), "due", None)
        answers.available_changed = bool(due)
        writes.flush()
        answers.maintenance_left = bool(due) or tx.any_scheduled()
        return answers

    return ops.store.transact(promote, what="due-job promotion")


def due_promotion(
    ops: WorkerOps, executors: Executors, on_effects: Callable[[Effects], None], cadence: Cadence
) -> WritePass:
    return WritePass(functools.partial(promote_due, ops), executors, on_effects, cadence, "due-job promotion")
