"""Recurring schedules (R-18): every ``schedule_interval_s`` the ticks that have come are
enqueued, one transaction per due schedule (``SchedulesService.fire``). Every replica
runs this loop; the jobs' idempotency keys make each tick one job, so no leader is
needed. A schedule that fails is logged and the others go on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from coordinator.scheduler.loop import every
from coordinator.service.executors import Executors
from coordinator.service.schedules import Fired, SchedulesService

log = logging.getLogger(__name__)


class ScheduleTicks:
    def __init__(
        self,
        schedules: SchedulesService,
        executors: Executors,
        on_fired: Callable[[Fired], None],
        interval_s: float,
    ) -> None:
        self.schedules = schedules
        self.executors = executors
        self.on_fired = on_fired
        self.interval_s = interval_s

    async def run_once(self) -> list[Fired]:
        """One pass: fires every due schedule and returns what each did."""
        fired: list[Fired] = []
        for name in await self.executors.read(self.schedules.due_names):
            try:
                result = await self.executors.write(self.schedules.fire, name)
            except Exception:
                log.exception("schedule %s: its ticks failed; trying again next pass", name)
                continue
            self.on_fired(result)
            fired.append(result)
        return fired

    async def _pass(self) -> None:
        await self.run_once()

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, stop, self._pass, "schedule ticks")
