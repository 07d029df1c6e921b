"""Due jobs: scheduled jobs whose run-at has come become ``available``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.scheduler.loop import every
from coordinator.service.batch import WorkerOps
from coordinator.service.effects import Effects
from coordinator.service.executors import Executors


class DuePromotion:
    def __init__(
        self, ops: WorkerOps, executors: Executors, on_effects: Callable[[Effects], None], interval_s: float
    ) -> None:
        self.ops = ops
        self.executors = executors
        self.on_effects = on_effects
        self.interval_s = interval_s

    async def run_once(self) -> None:
        self.on_effects(await self.executors.write(self.ops.promote_due))

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, stop, self.run_once, "due-job promotion")
