"""Retention's write (R-19): one batch of terminal jobs removed with everything that is
only theirs, in the caller's transaction (``Tx.purge``).

A purged job takes its attempts, its history (transitions) and its own dependency rows
(those where it is the child) with it. The rows where it is the *parent* stay: they hold
the copy of its output its children read (R-16), and no foreign key points from them to
the parent. Audit events stay too (the audit log is append-only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sqlalchemy import Connection, delete, select, text

from coordinator.domain.states import JobState
from coordinator.store.schema import FINISHED_PREDICATES, attempts, dependencies, jobs, transitions

_IN_CHUNK = 1_000
"""Most values bound into one ``IN (...)``: both engines cap a statement's parameters."""


def purge_jobs(
    conn: Connection, postgres: bool, state: JobState, finished_before_ms: int, limit: int
) -> Counter[str]:
    """Removes up to ``limit`` jobs in ``state`` (terminal) that finished before
    ``finished_before_ms``, oldest first, and returns how many it removed per queue.

    The batch's IDs are read through the state's ``ix_jobs_<state>_at``; on PostgreSQL its rows are
    locked with SKIP LOCKED, so replicas purging together take disjoint batches and a job
    another transaction holds (a retry, an enqueue naming it as a parent) is left for a
    later pass. Raises ValueError for a state that is not terminal.
    """
    if not state.terminal:
        raise ValueError(f"only terminal jobs are purged, not {state.value} ones")
    if limit <= 0:
        return Counter()
    query = (
        select(jobs.c.id)
        # The state as its index's predicate says it, so both planners use that index.
        .where(text(FINISHED_PREDICATES[state]), jobs.c.finished_at_ms < finished_before_ms)
        .order_by(jobs.c.finished_at_ms, jobs.c.id)
        .limit(limit)
    )
    if postgres:
        query = query.with_for_update(skip_locked=True)
    ids = sorted(conn.execute(query).scalars())
    return Counter({queue: count for (queue, _), count in remove_jobs(conn, ids, (state,)).items()})


def remove_jobs(conn: Connection, ids: Sequence[str], states: Sequence[JobState]) -> Counter[tuple[str, str]]:
    """Removes those of ``ids`` that are in one of ``states`` (all terminal; the caller
    selected and locked them), with their attempts, history and own dependency rows, and
    returns how many it removed per (queue, state). Raises ValueError for a state that is
    not terminal."""
    if not all(state.terminal for state in states):
        raise ValueError("only terminal jobs are purged")
    values = [state.value for state in states]
    removed: Counter[tuple[str, str]] = Counter()
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = list(ids[start : start + _IN_CHUNK])
        conn.execute(delete(attempts).where(attempts.c.job_id.in_(chunk)))
        conn.execute(delete(transitions).where(transitions.c.job_id.in_(chunk)))
        conn.execute(delete(dependencies).where(dependencies.c.child_id.in_(chunk)))
        # The state guard again: a job that is not terminal is never removed.
        guarded = delete(jobs).where(jobs.c.id.in_(chunk), jobs.c.state.in_(values))
        result = conn.execute(guarded.returning(jobs.c.queue, jobs.c.state))
        removed.update((row[0], row[1]) for row in result)
    return removed
