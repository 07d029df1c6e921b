"""A queue's due backlog as its controls see it (``domain.backlog``): the reads behind the
held-back gauge and the autoscalers' runnable count.

A queue without per-key controls needs no read of its keys: its due jobs are one capped
count. A queue with a per-key limit or a per-key rate is read once, in one grouped
statement: its due jobs (at most ``scan`` of them, a bounded walk of the claim index)
counted per key, joined with each key's reserved and running jobs (the partial index of
leased jobs, as many rows as the workers hold) and, for a per-key rate, its starts still
in the window; the statement sums each key's room in the database and answers one row,
however many keys the queue has.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import ColumnElement, Connection, case, func, select, text
from sqlalchemy.sql.expression import Subquery

from coordinator.domain.backlog import HeldBack, KeyedBacklog, hold_back
from coordinator.domain.rates import QueueRate, room
from coordinator.domain.records import QueueRecord
from coordinator.domain.states import JobState
from coordinator.store.claim_rates import counted_against_rate, rate_of
from coordinator.store.schema import CLAIMABLE_PREDICATE, LEASED_PREDICATE, jobs, queue_rate_slots


def keyed(queue: QueueRecord) -> bool:
    """Whether the queue's controls hold jobs back key by key (a per-key limit or rate)."""
    return queue.key_limit is not None or (queue.rate_count is not None and queue.rate_per_key)


def held_back(
    conn: Connection,
    queue: QueueRecord,
    due: int,
    queue_active: int,
    now_ms: int,
    *,
    due_until_ms: int | None = None,
    wire_names: Sequence[str] = (),
    scan: int,
) -> HeldBack:
    """What ``queue``'s controls make of its due jobs now. ``due`` is their count when
    the queue has no per-key control (then nothing more is read for the keys); with one,
    they are read per key, due by ``due_until_ms`` (default now), of ``wire_names`` (all
    when empty), at most ``scan`` of them. ``queue_active``: its reserved and running jobs,
    every wire name (as many as its limit, at least, when it has one)."""
    if queue.paused:
        return hold_back(queue, KeyedBacklog.unkeyed(due), queue_active, None)
    rate = rate_of(queue)
    backlog = KeyedBacklog.unkeyed(due)
    if keyed(queue):
        until = now_ms if due_until_ms is None else due_until_ms
        backlog = keyed_backlog(conn, queue, rate, now_ms, until, wire_names, scan)
    rate_room = None
    if rate is not None and not rate.per_key and backlog.due:
        rate_room = room(rate, counted_against_rate(conn, queue.name, rate, now_ms))
    return hold_back(queue, backlog, queue_active, rate_room)


def keyed_backlog(
    conn: Connection,
    queue: QueueRecord,
    rate: QueueRate | None,
    now_ms: int,
    due_until_ms: int,
    wire_names: Sequence[str],
    scan: int,
) -> KeyedBacklog:
    """The one grouped statement (see the module)."""
    due = _due_by_key(queue.name, due_until_ms, wire_names, scan)
    leased = _leased_by_key(queue.name)
    count = due.c.n
    within_limit: ColumnElement[int] = count
    if queue.key_limit is not None:
        within_limit = _least(count, _positive(queue.key_limit - func.coalesce(leased.c.active, 0)))
    within_rate = within_limit
    joined = due.outerjoin(leased, leased.c.key == due.c.key)
    if rate is not None and rate.per_key:
        started = _started_by_key(queue.name, rate, now_ms)
        joined = joined.outerjoin(started, started.c.key == due.c.key)
        used = func.coalesce(leased.c.reserved, 0) + func.coalesce(started.c.n, 0)
        within_rate = _least(within_limit, _positive(rate.count - used))
    row = conn.execute(
        select(
            func.coalesce(func.sum(count), 0),
            func.coalesce(func.sum(within_limit), 0),
            func.coalesce(func.sum(within_rate), 0),
        ).select_from(joined)
    ).one()
    return KeyedBacklog(int(row[0]), int(row[1]), int(row[2]))


def _due_by_key(queue: str, due_until_ms: int, wire_names: Sequence[str], scan: int) -> Subquery:
    # The claim index's predicate as text, word for word, so the planner walks that
    # partial index (ix_jobs_claim_turns holds the key too) and stops after ``scan``.
    walk = select(jobs.c.concurrency_key.label("key")).where(
        jobs.c.queue == queue, text(CLAIMABLE_PREDICATE), jobs.c.run_at_ms <= due_until_ms
    )
    if wire_names:
        walk = walk.where(jobs.c.wire_name.in_(sorted(set(wire_names))))
    bounded = walk.limit(scan).subquery("due_jobs")
    return select(bounded.c.key, func.count().label("n")).group_by(bounded.c.key).subquery("due")


def _leased_by_key(queue: str) -> Subquery:
    reserved = case((jobs.c.state == JobState.RESERVED.value, 1), else_=0)
    return (
        select(
            jobs.c.concurrency_key.label("key"),
            func.count().label("active"),
            func.sum(reserved).label("reserved"),
        )
        .where(jobs.c.queue == queue, text(LEASED_PREDICATE))
        .group_by(jobs.c.concurrency_key)
        .subquery("leased")
    )


def _started_by_key(queue: str, rate: QueueRate, now_ms: int) -> Subquery:
    slots = queue_rate_slots.c
    return (
        select(slots.key.label("key"), func.sum(slots.granted).label("n"))
        .where(slots.queue == queue, slots.slot_ms > rate.counted_since(now_ms))
        .group_by(slots.key)
        .subquery("started")
    )


def _least(a: ColumnElement[int], b: ColumnElement[int]) -> ColumnElement[int]:
    return case((a < b, a), else_=b)


def _positive(value: ColumnElement[int]) -> ColumnElement[int]:
    return case((value > 0, value), else_=0)
