"""The facts ``domain.flow.waiting_reason`` decides on, for one job: its queue's controls
and, bounded by the limits, the queue's and the job's key's reserved and running jobs
(two counts over the partial indexes of leased jobs, each stopping at its limit), and,
for a rated queue, what counts against its rate now (``store.claim_rates``)."""

from __future__ import annotations

from sqlalchemy import Connection, func, literal, select, text

from coordinator.domain.records import JobRecord, QueueRecord
from coordinator.store.claim_rates import counted_against_rate, rate_of
from coordinator.store.rows import queue_from_row
from coordinator.store.schema import LEASED_PREDICATE, jobs, queues

WaitingFacts = tuple[QueueRecord | None, int, int, dict[str, int] | None]
"""The queue, its reserved and running jobs, the job's key's, and its rate's counts."""


def waiting_facts(conn: Connection, job: JobRecord, now_ms: int) -> WaitingFacts:
    row = conn.execute(select(queues).where(queues.c.name == job.queue)).first()
    queue = queue_from_row(row) if row is not None else None
    if queue is None or queue.paused:
        return queue, 0, 0, None
    queue_active = _active(conn, job, queue.concurrency_limit, keyed=False)
    key_active = _active(conn, job, queue.key_limit, keyed=True)
    rate = rate_of(queue)
    rate_used = counted_against_rate(conn, queue.name, rate, now_ms) if rate is not None else None
    return queue, queue_active, key_active, rate_used


def _active(conn: Connection, job: JobRecord, cap: int | None, *, keyed: bool) -> int:
    if cap is None:
        return 0
    inner = select(literal(1)).where(jobs.c.queue == job.queue, text(LEASED_PREDICATE))
    if keyed:
        inner = inner.where(jobs.c.concurrency_key == job.concurrency_key)
    counted = inner.limit(cap).subquery()
    return int(conn.execute(select(func.count()).select_from(counted)).scalar_one())
