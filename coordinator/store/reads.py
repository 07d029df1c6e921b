"""The store's reads: each a named query over a read connection, returning domain values."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Select, func, literal, select, text, tuple_

from coordinator.domain.backlog import KEYS_NAMED
from coordinator.domain.demand import DemandTarget, SlotDemand
from coordinator.domain.naming import natural_key
from coordinator.domain.records import (
    AttemptRecord,
    AuditEvent,
    FinishedMinute,
    JobRecord,
    LeaseHolder,
    QueueRecord,
    QueueStats,
    Relatives,
    TokenRecord,
    Transition,
)
from coordinator.domain.states import LEASED_STATES, JobState
from coordinator.store import backlog
from coordinator.store.claim_rates import counted_against_rate, rate_of
from coordinator.store.history import read_history
from coordinator.store.rows import (
    attempt_from_row,
    attempts_from,
    event_from_row,
    job_from_mapping,
    job_from_row,
    jobs_from,
    queue_from_row,
    token_from_row,
)
from coordinator.store.schema import (
    CLAIMABLE_PREDICATE,
    LEASED_PREDICATE,
    attempts,
    audit_events,
    dependencies,
    jobs,
    queue_count_deltas,
    queue_counts,
    queue_finished,
    queues,
    tokens,
)

_LIST_COLUMNS = [c for c in jobs.c if c.name not in ("payload", "output")]


def get_job(conn: Connection, job_id: str) -> JobRecord | None:
    row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
    return job_from_row(row) if row is not None else None


def get_jobs(conn: Connection, job_ids: Sequence[str]) -> dict[str, JobRecord]:
    if not job_ids:
        return {}
    rows = conn.execute(select(jobs).where(jobs.c.id.in_(sorted(set(job_ids)))))
    return {r.id: r for r in jobs_from(rows)}


def list_jobs(
    conn: Connection,
    *,
    queue: str | None,
    state: JobState | None,
    wire_name: str | None,
    after_id: str | None,
    limit: int,
) -> list[JobRecord]:
    conditions = []
    if queue is not None:
        conditions.append(jobs.c.queue == queue)
    if state is not None:
        conditions.append(jobs.c.state == state.value)
    if wire_name is not None:
        conditions.append(jobs.c.wire_name == wire_name)
    if after_id is not None:
        conditions.append(jobs.c.id < after_id)
    query = select(*_LIST_COLUMNS).where(*conditions).order_by(jobs.c.id.desc()).limit(limit)
    rows = conn.execute(query).all()
    return [job_from_mapping({**row._mapping, "payload": b"", "output": None}) for row in rows]


def in_flight_by_worker(conn: Connection, worker_ids: Sequence[str]) -> dict[str, int]:
    """How many jobs each worker holds reserved or running (the leased index)."""
    if not worker_ids:
        return {}
    query = (
        select(jobs.c.worker_id, func.count())
        .where(
            jobs.c.state.in_([s.value for s in LEASED_STATES]),
            jobs.c.worker_id.in_(sorted(set(worker_ids))),
        )
        .group_by(jobs.c.worker_id)
    )
    return {worker_id: int(count) for worker_id, count in conn.execute(query)}


def relatives(conn: Connection, job_id: str) -> Relatives:
    parents = conn.execute(
        select(dependencies.c.parent_id)
        .where(dependencies.c.child_id == job_id)
        .order_by(dependencies.c.parent_id)
    )
    children = conn.execute(
        select(dependencies.c.child_id)
        .where(dependencies.c.parent_id == job_id)
        .order_by(dependencies.c.child_id)
    )
    return Relatives(tuple(row[0] for row in parents), tuple(row[0] for row in children))


def get_attempt(conn: Connection, attempt_id: str) -> AttemptRecord | None:
    row = conn.execute(select(attempts).where(attempts.c.id == attempt_id)).first()
    return attempt_from_row(row) if row is not None else None


def list_attempts(conn: Connection, job_id: str) -> list[AttemptRecord]:
    rows = conn.execute(
        select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.claimed_at_ms, attempts.c.id)
    )
    return list(attempts_from(rows))


def list_transitions(conn: Connection, job_id: str) -> list[Transition]:
    return read_history(conn, job_id)


def queue_stats(
    conn: Connection,
    now_ms: int,
    *,
    after_name: str | None = None,
    limit: int | None = None,
    name: str | None = None,
) -> list[QueueStats]:
    """Known queues in natural order (``cq2`` before ``cq10``), keyset-paged: at most
    ``limit`` after the queue ``after_name`` (known or not); only the queue ``name``, if
    given (none when it is not known: ``GetQueue``). Each comes with its jobs per state
    (the maintained counts plus the deltas not folded yet: small reads of the page's
    queues, never a scan of the jobs) and its oldest due job (the first entry of its part
    of the due index)."""
    query = select(queues).order_by(queues.c.sort_key, queues.c.name)
    if after_name is not None:
        position = (literal(natural_key(after_name)), literal(after_name))
        query = query.where(tuple_(queues.c.sort_key, queues.c.name) > tuple_(*position))
    if name is not None:
        query = query.where(queues.c.name == name)
    if limit is not None:
        query = query.limit(limit)
    page = [queue_from_row(row) for row in conn.execute(query)]
    names = [queue.name for queue in page]
    counts: dict[str, dict[JobState, int]] = {}
    for chunk in _chunks(names):
        for queue, state, count in conn.execute(select(queue_counts).where(queue_counts.c.queue.in_(chunk))):
            counts.setdefault(queue, {})[JobState(state)] = int(count)
        deltas = queue_count_deltas.c
        pending = (
            select(deltas.queue, deltas.state, func.sum(deltas.delta))
            .where(deltas.queue.in_(chunk))
            .group_by(deltas.queue, deltas.state)
        )
        for queue, state, delta in conn.execute(pending):
            by_state = counts.setdefault(queue, {})
            by_state[JobState(state)] = by_state.get(JobState(state), 0) + int(delta)
    result: list[QueueStats] = []
    for queue in page:
        # The first entry of the queue's part of ix_jobs_due. The state test is the
        # index's own predicate, as text: a planner can only use a partial index when the
        # query implies its predicate, and bound parameters prove nothing.
        oldest = conn.execute(
            select(jobs.c.run_at_ms)
            .where(jobs.c.queue == queue.name, text(CLAIMABLE_PREDICATE), jobs.c.run_at_ms <= now_ms)
            .order_by(jobs.c.run_at_ms)
            .limit(1)
        ).scalar()
        by_state = counts.get(queue.name, {})
        result.append(
            QueueStats(
                queue=queue,
                counts={state: by_state.get(state, 0) for state in JobState},
                oldest_due_run_at_ms=int(oldest) if oldest is not None else None,
                **_keys(conn, queue, now_ms),
            )
        )
    return result


def _keys(conn: Connection, queue: QueueRecord, now_ms: int) -> dict[str, Any]:
    """A queue with a per-key control: its active keys, and those at their limit or with
    their rate's window full, counted and the first ``KEYS_NAMED`` named. Bounded reads:
    the leased jobs per key (as many as the workers hold) and, for a per-key rate, its
    counters in the window (at most eleven a key that started jobs in it)."""
    if not backlog.keyed(queue):
        return {}
    active = _active_by_key(conn, queue.name)
    found: dict[str, Any] = {"active_keys": len(active)}
    if queue.key_limit is not None:
        full = sorted(key for key, n in active.items() if n >= (queue.key_limit or 0))
        found |= {"keys_at_limit": len(full), "first_keys_at_limit": tuple(full[:KEYS_NAMED])}
    rate = rate_of(queue)
    if rate is not None and rate.per_key:
        used = counted_against_rate(conn, queue.name, rate, now_ms)
        spent = sorted(key for key, n in used.items() if n >= rate.count)
        found |= {"keys_at_rate": len(spent), "first_keys_at_rate": tuple(spent[:KEYS_NAMED])}
    return found


def job_totals(conn: Connection) -> tuple[int, dict[JobState, int]]:
    """How many queues there are, and the jobs of every queue per state (two sums over
    the maintained counts and the deltas not folded yet: no scan of the jobs)."""
    totals = dict.fromkeys(JobState, 0)
    folded = select(queue_counts.c.state, func.sum(queue_counts.c.count)).group_by(queue_counts.c.state)
    pending = select(queue_count_deltas.c.state, func.sum(queue_count_deltas.c.delta)).group_by(
        queue_count_deltas.c.state
    )
    for query in (folded, pending):
        for state, count in conn.execute(query):
            totals[JobState(state)] += int(count or 0)
    known = int(conn.execute(select(func.count()).select_from(queues)).scalar_one())
    return known, totals


_IN_CHUNK = 500
"""Names per IN list: well under every engine's limit of bound parameters."""


def _chunks(names: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(names), _IN_CHUNK):
        yield names[start : start + _IN_CHUNK]


def slot_demand(
    conn: Connection, target: DemandTarget, now_ms: int, cap: int, scan: int, *, leased_enough: bool = False
) -> SlotDemand:
    """The queue's leased jobs and its jobs claimable by ``now_ms`` plus the horizon that
    its controls let run now, each counted up to ``cap`` (the count walks at most ``cap``
    entries of the partial leased and due indexes, whatever the backlog; a queue with a
    per-key control walks more due jobs, ``_runnable``). The state tests are those
    indexes' own predicates, as text, so that the planners use them. ``leased_enough``:
    the caller asks only whether the slots reach ``cap`` (KEDA's IsActive), so once the
    leased jobs do, the due ones are not read (due 0)."""
    row = conn.execute(select(queues).where(queues.c.name == target.queue)).first()
    queue = queue_from_row(row) if row is not None else None
    paused = queue is not None and queue.paused
    leased = _capped_count(
        conn, select(jobs.c.id).where(jobs.c.queue == target.queue, text(LEASED_PREDICATE)), target, cap
    )
    if paused or (leased_enough and leased >= cap):
        return SlotDemand(leased=leased, due=0, paused=paused)
    until_ms = now_ms + target.horizon_ms
    claimable = select(jobs.c.id).where(
        jobs.c.queue == target.queue, text(CLAIMABLE_PREDICATE), jobs.c.run_at_ms <= until_ms
    )
    due = _capped_count(conn, claimable, target, cap)
    if queue is not None and not queue.free and due:
        due = _runnable(conn, queue, target, due, now_ms, cap, scan)
    return SlotDemand(leased=leased, due=due, paused=paused)


FIRST_WALK = 1_000
"""Due jobs a queue with a per-key control is first walked for, at least ``cap``."""


def _runnable(
    conn: Connection, queue: QueueRecord, target: DemandTarget, due: int, now_ms: int, cap: int, scan: int
) -> int:
    """Of ``due`` jobs (counted up to ``cap``), those the queue's controls let run now, up
    to ``cap``. A queue with a per-key control is walked for ``FIRST_WALK`` due jobs first,
    and for ``scan`` only when those were not all and left fewer than ``cap`` runnable:
    the runnable jobs of part of the backlog are never more than the whole's, so
    ``cap`` of them answer already: with a cap of 1 on 200,000 due jobs over 10,000 keys,
    12 ms instead of 486 ms (benchmarks/LOG.md, 2026-12-06, "Held-back reads")."""
    active = _queue_active(conn, queue)
    walk = min(max(cap, FIRST_WALK), max(cap, scan))
    while True:
        found = backlog.held_back(
            conn,
            queue,
            due,
            active,
            now_ms,
            due_until_ms=now_ms + target.horizon_ms,
            wire_names=target.wire_names,
            scan=walk,
        )
        walked = found.runnable + sum(found.held.values())
        if found.runnable >= cap or walked < walk or walk >= max(cap, scan) or not backlog.keyed(queue):
            return min(found.runnable, cap)
        walk = max(cap, scan)


def _queue_active(conn: Connection, queue: QueueRecord) -> int:
    """The queue's reserved and running jobs of every wire name, counted up to its limit
    (all its limit needs); 0 without one (nothing else uses it)."""
    limit = queue.concurrency_limit
    if limit is None:
        return 0
    leased = select(jobs.c.id).where(jobs.c.queue == queue.name, text(LEASED_PREDICATE)).limit(limit)
    return int(conn.execute(select(func.count()).select_from(leased.subquery())).scalar_one())


def _capped_count(conn: Connection, query: Select[tuple[str]], target: DemandTarget, cap: int) -> int:
    if target.wire_names:
        query = query.where(jobs.c.wire_name.in_(target.wire_names))
    limited = query.limit(cap).subquery()
    return int(conn.execute(select(func.count()).select_from(limited)).scalar_one())


def finished_since(conn: Connection, since_ms: int) -> list[FinishedMinute]:
    """The per-minute counts of ended jobs from the minute holding ``since_ms`` on, by
    minute, queue and state (a range of ``queue_finished``'s key)."""
    first = since_ms - since_ms % 60_000
    rows = conn.execute(
        select(
            queue_finished.c.minute_ms, queue_finished.c.queue, queue_finished.c.state, queue_finished.c.count
        )
        .where(queue_finished.c.minute_ms >= first)
        .order_by(queue_finished.c.minute_ms, queue_finished.c.queue, queue_finished.c.state)
    )
    return [
        FinishedMinute(int(minute), queue, JobState(state), int(count))
        for minute, queue, state, count in rows
    ]


def lease_holders(conn: Connection, limit: int) -> list[LeaseHolder]:
    """The workers holding reserved or running jobs, most jobs first, at most ``limit``
    of them: read from the leased jobs only (the partial index of leased states), whatever
    the size of the table."""
    leased = text(LEASED_PREDICATE)
    rows = conn.execute(
        select(jobs.c.worker_id, jobs.c.state, func.count())
        .where(leased, jobs.c.worker_id.is_not(None))
        .group_by(jobs.c.worker_id, jobs.c.state)
    )
    held: dict[str, dict[str, int]] = {}
    for worker_id, state, count in rows:
        held.setdefault(worker_id, {})[state] = int(count)
    holders = [
        LeaseHolder(worker_id, by_state.get("reserved", 0), by_state.get("running", 0))
        for worker_id, by_state in held.items()
    ]
    holders.sort(key=lambda h: (-(h.reserved + h.running), h.worker_id))
    return holders[:limit]


def count_by_state(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
    return {state: int(count) for state, count in rows}


def get_token(conn: Connection, token_id: str) -> TokenRecord | None:
    row = conn.execute(select(tokens).where(tokens.c.id == token_id)).first()
    return token_from_row(row) if row is not None else None


def revoked_tokens(conn: Connection, token_ids: Sequence[str]) -> set[str]:
    """Those of ``token_ids`` that are revoked or do not exist (any more)."""
    wanted = sorted(set(token_ids))
    if not wanted:
        return set()
    rows = conn.execute(select(tokens.c.id).where(tokens.c.id.in_(wanted), tokens.c.revoked_at_ms.is_(None)))
    return set(wanted) - {row[0] for row in rows}


def list_tokens(conn: Connection, *, include_revoked: bool) -> list[TokenRecord]:
    query = select(tokens).order_by(tokens.c.created_at_ms, tokens.c.id)
    if not include_revoked:
        query = query.where(tokens.c.revoked_at_ms.is_(None))
    return [token_from_row(row) for row in conn.execute(query)]


def list_audit_events(
    conn: Connection, *, action: str | None, target: str | None, before_id: int | None, limit: int
) -> list[AuditEvent]:
    """Newest first, keyset-paged before ``before_id``."""
    conditions = []
    if action is not None:
        conditions.append(audit_events.c.action == action)
    if target is not None:
        conditions.append(audit_events.c.target == target)
    if before_id is not None:
        conditions.append(audit_events.c.id < before_id)
    query = select(audit_events).where(*conditions).order_by(audit_events.c.id.desc()).limit(limit)
    return [event_from_row(row) for row in conn.execute(query)]


def _active_by_key(conn: Connection, queue: str) -> dict[str, int]:
    """A queue's reserved and running jobs per concurrency key: a walk of the partial
    index of leased jobs, as many as the workers hold (``ix_jobs_queue_key_leased``)."""
    rows = conn.execute(
        select(jobs.c.concurrency_key, func.count())
        .where(jobs.c.queue == queue, text(LEASED_PREDICATE))
        .group_by(jobs.c.concurrency_key)
    )
    return {str(key): int(count) for key, count in rows}
