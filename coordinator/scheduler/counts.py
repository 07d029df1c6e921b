"""Queue counts (R-17): folds the job-count deltas every write appends into the
maintained counts per queue and state, so the deltas stay few and a listing stays two
small reads."""

from __future__ import annotations

import asyncio

from coordinator.scheduler.loop import every
from coordinator.service.executors import Executors
from coordinator.service.queues import QueueService


class QueueCountFolding:
    def __init__(self, queues: QueueService, executors: Executors, interval_s: float) -> None:
        self.queues = queues
        self.executors = executors
        self.interval_s = interval_s

    async def run_once(self) -> int:
        return await self.executors.write(self.queues.fold_counts)

    async def run(self, stop: asyncio.Event) -> None:
        async def fold() -> None:
            await self.run_once()

        await every(self.interval_s, stop, fold, "queue count folding")
