"""Queue counts (R-17): folds the job-count deltas every write appends into the
maintained counts per queue and state, so the deltas stay few and a listing stays two
small reads."""

from __future__ import annotations

import asyncio
import logging

from coordinator.scheduler.loop import Cadence
from coordinator.service.executors import Executors
from coordinator.service.queues import QueueService

log = logging.getLogger(__name__)


class QueueCountFolding:
    def __init__(self, queues: QueueService, executors: Executors, cadence: Cadence) -> None:
        self.queues = queues
        self.executors = executors
        self.cadence = cadence

    async def run_once(self) -> int:
        """Folds the deltas there are; returns how many it folded. After a fold that
        found some, the planner statistics are refreshed if the jobs outgrew them
        (``store.planner``), on the read pool: an ANALYZE must not hold up the writer."""
        folded = await self.executors.write(self.queues.fold_counts)
        if folded:
            try:
                await self.executors.read(self.queues.store.refresh_planner_statistics)
            except Exception:
                log.exception("refreshing the planner statistics failed; trying again after the next fold")
        return folded

    async def run(self, stop: asyncio.Event) -> None:
        while not await self.cadence.sleep(stop):
            try:
                folded = await self.run_once()
            except Exception:
                log.exception("queue count folding failed; retrying next interval")
                continue
            self.cadence.idle = folded == 0  # until this replica writes again
