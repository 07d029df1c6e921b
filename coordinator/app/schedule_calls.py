"""The facade's calls on recurring schedules (R-18)."""

from __future__ import annotations

from coordinator.app.core import CoordinatorCore
from coordinator.domain.access import Actor
from coordinator.domain.schedules import NewScheduleSpec, ScheduleView
from coordinator.service.schedules import Fired


class ScheduleCalls(CoordinatorCore):
    """Schedules: create, list, pause, resume, delete; and their ticks' follow-ups."""

    def _schedule_fired(self, fired: Fired) -> None:
        """A schedule's new jobs, as ``enqueue`` hands them on: metrics and the dispatcher."""
        created = [spec for spec, item in fired.enqueued if not item.existing]
        self.metrics.enqueued_many((spec.queue, spec.wire_name) for spec in created)
        for spec in created:
            self.dispatcher.jobs_available(spec.run_at_ms)

    async def create_schedule(self, spec: NewScheduleSpec, actor: Actor) -> ScheduleView:
        return await self.executors.write(self.schedules.create, spec, actor)

    async def list_schedules(self, *, page_size: int, page_token: str) -> tuple[list[ScheduleView], str]:
        return await self.executors.read(self.schedules.list, page_size=page_size, page_token=page_token)

    async def pause_schedule(self, name: str, actor: Actor) -> ScheduleView:
        return await self.executors.write(self.schedules.pause, name, actor)

    async def resume_schedule(self, name: str, actor: Actor) -> ScheduleView:
        return await self.executors.write(self.schedules.resume, name, actor)

    async def delete_schedule(self, name: str, actor: Actor) -> ScheduleView:
        """Deletes the schedule (audited); the jobs it enqueued stay."""
        return await self.executors.write(self.schedules.delete, name, actor)

    async def run_schedule_now(self, name: str, actor: Actor) -> str:
        """Enqueues one job from the schedule now (audited, ``schedule.run_now``); its ID."""
        fired = await self.executors.write(self.schedules.run_now, name, actor)
        self._schedule_fired(fired)
        return fired.enqueued[0][1].job_id
