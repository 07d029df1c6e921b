"""The facade's calls on queues (R-17) and the activity the dashboard shows."""

from __future__ import annotations

from collections.abc import Mapping

from coordinator.app.core import CoordinatorCore
from coordinator.domain.access import Actor
from coordinator.domain.activity import HOUR_MS, Throughput
from coordinator.domain.backlog import QueueView
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.records import LeaseHolder, QueueRecord, QueueStats
from coordinator.domain.states import JobState


class QueueCalls(CoordinatorCore):
    """Queues: pages, totals, demand and controls; throughput and lease holders."""

    async def list_queues(self, *, page_size: int = 0, page_token: str = "") -> tuple[list[QueueStats], str]:
        """A page of queues by name (``page_size`` 0: the default, clamped to
        ``max_page_size``) and the next page's token ('' at the end)."""
        return await self.executors.read(self.queues.page, page_size=page_size, page_token=page_token)

    async def get_queue(self, name: str) -> QueueView:
        """One queue with its counts, keys and what its controls hold back now;
        NotFound for an unknown one, InvalidArgument for a bad name (nothing read)."""
        return await self.executors.read(self.queues.get, name)

    async def job_totals(self) -> tuple[int, dict[JobState, int]]:
        """How many queues are known, and the jobs of all of them per state."""
        return await self.executors.read(self.queues.totals)

    async def slot_demand(self, target: DemandTarget, cap: int, leased_enough: bool = False) -> SlotDemand:
        """The worker slots ``target`` wants now, each count capped at ``cap``, read from
        the database (every replica answers the same; docs/autoscaling.md). With
        ``leased_enough``, the due jobs are not read once the leased ones reach ``cap``."""
        return await self.executors.read(self.queues.demand, target, cap, leased_enough)

    async def delete_queue(self, name: str, actor: Actor) -> QueueRecord:
        """Audited; refused (nothing changes) while the queue holds jobs."""
        return await self.executors.write(self.queues.delete, name, actor)

    async def pause_queue(self, name: str, actor: Actor) -> QueueRecord:
        """Audited; the queue's jobs are claimed no more until it is resumed."""
        record, effects = await self.executors.write(self.queues.pause, name, actor)
        self._absorb(effects)
        return record

    async def resume_queue(self, name: str, actor: Actor) -> QueueRecord:
        """Audited; idle workers claim the queue's jobs again at once."""
        record, effects = await self.executors.write(self.queues.resume, name, actor)
        self._absorb(effects)
        self.arrivals.signal()
        return record

    async def set_queue_limit(self, name: str, limit: int | None, actor: Actor) -> QueueRecord:
        """Audited; ``None`` removes the limit."""
        record, effects = await self.executors.write(self.queues.set_limit, name, limit, actor)
        self._absorb(effects)
        return record

    async def set_queue_key_limit(self, name: str, limit: int | None, actor: Actor) -> QueueRecord:
        """Audited; ``None`` removes the per-key limit."""
        record, effects = await self.executors.write(self.queues.set_key_limit, name, limit, actor)
        self._absorb(effects)
        return record

    async def set_queue_rate(
        self, name: str, count: int | None, period_ms: int, per_key: bool, actor: Actor
    ) -> QueueRecord:
        """Audited; a ``count`` of None removes the rate."""
        record, effects = await self.executors.write(
            self.queues.set_rate, name, count, period_ms, per_key, actor
        )
        self._absorb(effects)
        return record

    # -- activity (the dashboard) --------------------------------------------------------

    async def throughput(self, window_ms: int = HOUR_MS, queue: str | None = None) -> Throughput:
        """Jobs that ended per minute over the last ``window_ms`` (default an hour), from
        the per-minute counts the count fold keeps: no scan of the jobs."""
        return await self.executors.read(self.activity.throughput, window_ms, queue)

    async def lease_holders(self, limit: int = 100) -> list[LeaseHolder]:
        """The workers holding reserved or running jobs now, on any replica."""
        return await self.executors.read(self.activity.lease_holders, limit)

    def _queue_stats_read(
        self,
        depths: Mapping[tuple[str, str], int],
        oldest_due_ms: Mapping[str, int],
        now_ms: int,
        paused: frozenset[str] = frozenset(),
        held: Mapping[tuple[str, str], int] | None = None,
        runnable: Mapping[str, int] | None = None,
    ) -> None:
        """One background read of the queue statistics: the gauges, and the depth series
        the dashboard draws (``app.depths``)."""
        self.metrics.queue_stats(depths, oldest_due_ms, now_ms, paused, held, runnable)
        self.depth_history.note(depths, now_ms, frozenset(oldest_due_ms) | paused)

    def queue_depths(self, queue: str) -> tuple[int | None, ...]:
        """The queue's depth in each of the last 60 minutes, as this replica read it."""
        return self.depth_history.series(queue, self.clock.now_ms())
