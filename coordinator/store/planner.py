"""PostgreSQL's planner statistics for the job tables, refreshed when the jobs outgrow them.

Every plan's row estimates, and the generic plan a prepared statement settles on after a
few runs, come from what ANALYZE last recorded. Autovacuum refreshes it only once a tenth
of a table changed and at most once a naptime (a minute by default), so a queue that goes
from a few jobs to a backlog of thousands within seconds is planned as if nearly empty
meanwhile: a claim then reads and sorts every claimable job of its queue (``ix_jobs_due``
and a sort, instead of walking ``ix_jobs_claim`` and stopping at its limit), and attempt
lookups scan the attempts table. Measured on a 20,000-job burst: 30-60 ms per claim.

So after folding the queue counts (which know how many jobs there are, per state) the
coordinator compares, for each table the hot statements read by key, a count it knows
with the planner's estimate: the jobs, and for the attempts the jobs that were claimed
(each has at least one). A table whose rows number more than ``OUTGROWN_FACTOR`` times
the estimate (and at least ``OUTGROWN_MIN_ROWS`` more) is analyzed (``ANALYZE
(SKIP_LOCKED)``); the new statistics also make PostgreSQL re-plan the prepared
statements that read it. SQLite needs none of this: its planner keeps
no statistics the store relies on (``tests/contract/test_query_plans.py``).
"""

from __future__ import annotations

from sqlalchemy import Connection, func, select, text

from coordinator.domain.states import JobState
from coordinator.store.schema import queue_count_deltas, queue_counts

OUTGROWN_FACTOR = 2
"""A table outgrew its statistics when its rows number this many times the estimate..."""
OUTGROWN_MIN_ROWS = 1_000
"""...and at least this many more (a small table's plans are cheap whatever they are)."""
_CLAIMED_STATES = tuple(state.value for state in (JobState.RESERVED, JobState.RUNNING, JobState.SUCCEEDED))
"""Jobs in these states have an attempt each at least (a failed or cancelled job may not)."""


def known_rows(conn: Connection) -> dict[str, int]:
    """A lower bound of the rows of each watched table, from the maintained job counts
    (with the deltas not folded yet): the jobs, and the attempts of claimed jobs."""
    per_state: dict[str, int] = {}
    sums = (
        select(queue_counts.c.state, func.sum(queue_counts.c.count)).group_by(queue_counts.c.state),
        select(queue_count_deltas.c.state, func.sum(queue_count_deltas.c.delta)).group_by(
            queue_count_deltas.c.state
        ),
    )
    for query in sums:
        for state, total in conn.execute(query):
            per_state[state] = per_state.get(state, 0) + int(total or 0)
    return {
        "jobs": sum(per_state.values()),
        "attempts": sum(per_state.get(state, 0) for state in _CLAIMED_STATES),
    }


def estimated_rows(conn: Connection, tables: list[str]) -> dict[str, int]:
    """The planner's row estimate of each table (0 when it was never analyzed)."""
    rows = conn.execute(
        text("SELECT relname, reltuples FROM pg_class WHERE oid = ANY(CAST(:names AS regclass[]))"),
        {"names": tables},
    )
    found = {name: max(int(estimate), 0) for name, estimate in rows}
    return {table: found.get(table, 0) for table in tables}


def outgrown(known: int, estimated: int) -> bool:
    return known > OUTGROWN_FACTOR * estimated and known - estimated >= OUTGROWN_MIN_ROWS


def analyze(conn: Connection, tables: list[str]) -> None:
    """Refreshes the statistics of ``tables`` (names from ``known_rows`` only); skips a
    table another ANALYZE or VACUUM holds, which is refreshing them anyway. Needs an
    autocommit connection (a rolled-back transaction would take them back)."""
    conn.exec_driver_sql(f"ANALYZE (SKIP_LOCKED) {', '.join(tables)}")
