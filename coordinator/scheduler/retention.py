"""Retention (R-19): every ``retention_interval_s``, terminal jobs older than their
state's age (``retain_succeeded_ms``, ``retain_failed_ms``, ``retain_cancelled_ms``) are
purged, one short write transaction of at most ``max_purge_batch`` jobs after another
until a batch comes back short. Each batch goes to the writer on its own, so worker
batches interleave with a long purge. Safe with any number of replicas (the batch's rows
are taken with SKIP LOCKED on PostgreSQL). After the purges, the queues left without
jobs and without controls are forgotten, in batches of the same size.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from coordinator.domain.access import Actor
from coordinator.domain.states import JobState
from coordinator.scheduler.loop import every
from coordinator.service.executors import Executors
from coordinator.service.retention import RetentionService, show_ms

log = logging.getLogger(__name__)


async def purge_all(
    service: RetentionService,
    executors: Executors,
    state: JobState,
    finished_before_ms: int,
    *,
    actor: Actor | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Purges ``state`` jobs that finished before ``finished_before_ms``, batch after
    batch, until a batch is short (or ``stop`` is set); returns how many in all. With
    ``actor`` the first batch records the purge in the audit log."""
    total = 0
    while True:
        removed = await executors.write(service.purge_batch, state, finished_before_ms, actor)
        actor = None
        total += removed
        if removed < service.batch_size or (stop is not None and stop.is_set()):
            return total


class Retention:
    """The retention loop over ``ages``: the age after which each state is purged."""

    def __init__(
        self,
        service: RetentionService,
        executors: Executors,
        ages: Mapping[JobState, int],
        interval_s: float,
    ) -> None:
        self.service = service
        self.executors = executors
        self.ages = dict(ages)
        self.interval_s = interval_s

    async def run_once(self, stop: asyncio.Event | None = None) -> dict[JobState, int]:
        """One pass: purges every state past its age; returns how many of each."""
        purged: dict[JobState, int] = {}
        for state, age_ms in self.ages.items():
            if stop is not None and stop.is_set():
                break
            cutoff = self.service.cutoff_ms(age_ms)
            purged[state] = await purge_all(self.service, self.executors, state, cutoff, stop=stop)
            if purged[state]:
                log.info(
                    "retention purged %d %s jobs finished before %s", purged[state], state, show_ms(cutoff)
                )
        if stop is None or not stop.is_set():
            forgotten = await self.forget_idle_queues(stop)
            if forgotten:
                log.info("retention forgot %d queues without jobs or controls", forgotten)
        return purged

    async def forget_idle_queues(self, stop: asyncio.Event | None = None) -> int:
        """Deletes the queues without jobs or controls, batch after batch; how many."""
        total = 0
        while True:
            forgotten = await self.executors.write(self.service.forget_idle_queues)
            total += len(forgotten)
            if len(forgotten) < self.service.batch_size or (stop is not None and stop.is_set()):
                return total

    async def run(self, stop: asyncio.Event) -> None:
        async def one_pass() -> None:
            await self.run_once(stop)

        await every(self.interval_s, stop, one_pass, "retention")
