"""A claim's rate limits (issue 41): how many jobs a rated queue may still hand out now,
and the grants its claims take, counted in ``queue_rate_slots`` (``domain.rates``).

A claim of a rated queue holds the queue's row lock (PostgreSQL, ``QueueOps.lock_queues``)
from reading the grants to its commit, so replicas claiming the same queue count one
window in turn, and the counts are rows of the database, so a restart grants nothing
afresh. A claim counts as a start: a claim that never starts keeps its grant until the
window passes it (the rate may be under-used, never exceeded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlalchemy import bindparam, func, select, update

from coordinator.domain.rates import QueueRate
from coordinator.domain.records import JobRecord, QueueRecord
from coordinator.store.schema import queue_rate_slots
from coordinator.store.tx_base import TxBase


def key_of(job: JobRecord) -> str:
    """The key a per-key rate counts ``job`` under. Every job has the implicit key ''
    until jobs carry one: this becomes ``job.concurrency_key`` (issue 41's keys)."""
    del job
    return ""


def rate_of(queue: QueueRecord) -> QueueRate | None:
    """The queue's rate, None when it has none."""
    if queue.rate_count is None or queue.rate_period_ms is None:
        return None
    return QueueRate(queue.rate_count, queue.rate_period_ms, queue.rate_per_key)


class RateOps(TxBase):
    def rate_grants_used(self, queue: str, rate: QueueRate, now_ms: int) -> dict[str, int]:
        """The grants of ``queue`` per key that still count against a grant made at
        ``now_ms``; rows no longer counted are deleted first (they never count again)."""
        since = rate.counted_since(now_ms)
        table = queue_rate_slots
        self._conn.execute(table.delete().where(table.c.queue == queue, table.c.slot_ms <= since))
        rows = self._conn.execute(
            select(table.c.key, func.sum(table.c.granted))
            .where(table.c.queue == queue, table.c.slot_ms > since)
            .group_by(table.c.key)
        )
        return {key: int(total) for key, total in rows}

    def add_rate_grants(self, queue: str, rate: QueueRate, now_ms: int, granted: Mapping[str, int]) -> None:
        """Counts ``granted`` jobs per key in the slot of ``now_ms``."""
        slot = rate.slot_of(now_ms)
        wanted = {key: n for key, n in granted.items() if n}
        if not wanted:
            return
        table = queue_rate_slots
        known = {
            row[0]
            for row in self._conn.execute(
                select(table.c.key).where(
                    table.c.queue == queue, table.c.slot_ms == slot, table.c.key.in_(sorted(wanted))
                )
            )
        }
        fresh = [
            {"queue": queue, "key": k, "slot_ms": slot, "granted": n}
            for k, n in wanted.items()
            if k not in known
        ]
        if fresh:
            self._conn.execute(table.insert(), fresh)
        more = [{"k": k, "n": n} for k, n in sorted(wanted.items()) if k in known]
        if more:
            self._conn.execute(
                update(table)
                .where(table.c.queue == queue, table.c.slot_ms == slot, table.c.key == bindparam("k"))
                .values(granted=table.c.granted + bindparam("n")),
                more,
            )

    def forget_rate_grants(self, queues: Iterable[str]) -> None:
        """Drops the grants of ``queues`` (their rate was changed or removed)."""
        wanted = sorted(set(queues))
        if wanted:
            self._conn.execute(queue_rate_slots.delete().where(queue_rate_slots.c.queue.in_(wanted)))
