"""A job's parents and children with their states, at most ``limit`` each way: two
index reads of ``dependencies`` joined to the jobs, whatever the fan-out."""

from __future__ import annotations

from sqlalchemy import Connection, select

from coordinator.domain.graph import Neighbourhood, Relative
from coordinator.domain.states import JobState
from coordinator.store.schema import dependencies, jobs


def neighbourhood(conn: Connection, job_id: str, limit: int) -> Neighbourhood:
    found: list[tuple[Relative, ...]] = []
    more: list[bool] = []
    for mine, theirs in (
        (dependencies.c.child_id, dependencies.c.parent_id),
        (dependencies.c.parent_id, dependencies.c.child_id),
    ):
        rows = conn.execute(
            select(jobs.c.id, jobs.c.wire_name, jobs.c.state)
            .select_from(dependencies.join(jobs, jobs.c.id == theirs))
            .where(mine == job_id)
            .order_by(theirs)
            .limit(limit + 1)
        ).all()
        found.append(tuple(Relative(r.id, r.wire_name, JobState(r.state)) for r in rows[:limit]))
        more.append(len(rows) > limit)
    return Neighbourhood(found[0], found[1], more[0], more[1])
