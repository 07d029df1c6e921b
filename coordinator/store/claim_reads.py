"""The statements of a claim (``store.claims``), built once (see ``tx_base.Lockable``).

Each states the claimable predicate word for word (``CLAIMABLE_PREDICATE``, as text, not
bound parameters): only then may a planner use the partial indexes over claimable jobs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Integer,
    Select,
    TextClause,
    bindparam,
    literal_column,
    select,
    text,
)

from coordinator.store.prepared import Prepared
from coordinator.store.schema import CLAIMABLE_PREDICATE, JOB_COLUMNS, jobs
from coordinator.store.tx_base import Lockable

DUE = "jobs.run_at_ms + 0 <= :now_ms"
"""Due by ``now_ms``. "+ 0": SQLite would take ix_jobs_due for the run-at range and then
sort every claimable job of the queue; ix_jobs_claim gives the order, so LIMIT ends the
walk. An expression keeps the range off any index."""


def _claimable_in_queue(*more: TextClause) -> Lockable:
    return Lockable(
        select(jobs)
        .where(
            jobs.c.queue == bindparam("queue"),
            text(CLAIMABLE_PREDICATE),
            text(DUE).bindparams(bindparam("now_ms", type_=BigInteger)),
            jobs.c.wire_name.in_(bindparam("wire_names", expanding=True)),
            *more,
        )
        .order_by(jobs.c.priority.desc(), jobs.c.run_at_ms, jobs.c.id)
        .limit(bindparam("limit", type_=Integer)),
        skip_locked=True,
    )


CLAIMABLE_IN_QUEUE = _claimable_in_queue()
"""A queue's claimable jobs of some wire names, the first ``limit`` in claim order."""
_PAST_TAKEN = {
    False: _claimable_in_queue(text("jobs.id NOT IN (SELECT value FROM json_each(:taken))")),
    True: _claimable_in_queue(text("jobs.id <> ALL(CAST(:taken AS text[]))")),
}
"""The same, but for the jobs ``taken`` (bound as one value, however many): those a claim
handed out and its caller has not written yet, which are still claimable in the database
(and, on PostgreSQL, locked by this very transaction, so not skipped). Reading past them
in the database keeps a call with many claims of one queue from reading and decoding
each earlier claim's jobs again."""


class _WindowRead(Lockable):
    """A read whose lock is taken inside it (its window), not on its outer rows."""

    def __init__(self, plain: Select[Any], locked: Select[Any]) -> None:
        self.plain = Prepared(plain)
        self.locked = Prepared(locked)


def _window_past_keys(taken: str, without_keys: str) -> Lockable:
    # The window is the plain claim walk (ix_jobs_claim in order, stopping at ``:window``
    # rows), locked as it goes on PostgreSQL; the keys with no room are left out of what it
    # yields. Rows are pulled only until ``:limit`` pass, so the walk locks the jobs it
    # hands out and the no-room jobs in front of them, at most ``:window``.
    def window(locked: bool) -> Select[Any]:
        walk = (
            select(jobs)
            .where(
                jobs.c.queue == bindparam("queue"),
                text(CLAIMABLE_PREDICATE),
                text(DUE).bindparams(bindparam("now_ms", type_=BigInteger)),
                jobs.c.wire_name.in_(bindparam("wire_names", expanding=True)),
                text(taken),
            )
            .order_by(jobs.c.priority.desc(), jobs.c.run_at_ms, jobs.c.id)
            .limit(bindparam("window", type_=Integer))
        )
        walk = walk.with_for_update(skip_locked=True) if locked else walk
        kept = walk.subquery("kept")
        outer = select(kept).where(text(without_keys))
        if locked:
            outer = outer.order_by(kept.c.priority.desc(), kept.c.run_at_ms, kept.c.id)
        # SQLite (the plain read): no outer ORDER BY. SQLite runs the walk as a co-routine
        # yielding its rows in its own order (the walk cannot be flattened: it has a LIMIT
        # and the outer query a WHERE), but an outer ORDER BY made it sort them in a temp
        # b-tree, so it pulled the whole window, every row decoded, before the first row
        # came out: 1.07 -> 0.46 ms a read of 64 of 10,000 keys, 0.33 -> 0.16 ms a read of 8
        # (the statement alone, load 1-3; benchmarks/LOG.md, 2026-12-07).
        return outer.limit(bindparam("limit", type_=Integer))

    return _WindowRead(window(locked=False), window(locked=True))


_WINDOW_PAST_KEYS = {
    False: _window_past_keys(
        "jobs.id NOT IN (SELECT value FROM json_each(:taken))",
        "kept.concurrency_key NOT IN (SELECT value FROM json_each(:full_keys))",
    ),
    True: _window_past_keys(
        "jobs.id <> ALL(CAST(:taken AS text[]))", "kept.concurrency_key <> ALL(CAST(:full_keys AS text[]))"
    ),
}
"""``CLAIMABLE_IN_QUEUE`` past the jobs ``:taken``, without those of some concurrency keys
(those with no room, ``store.claim_keys``; both bound as one value however many), and
reading at most ``:window`` jobs: however deep a backlog the keys without room hold in
front, the read stops there (the keys behind it are found by their turns,
``store.claim_turns``)."""


def claimable_past_keys(postgres: bool) -> Lockable:
    """``_WINDOW_PAST_KEYS``: a bounded read past ``:taken`` and the keys ``:full_keys``."""
    return _WINDOW_PAST_KEYS[postgres]


def claimable_past(postgres: bool, taken: Sequence[str]) -> tuple[Lockable, dict[str, Any]]:
    """``CLAIMABLE_IN_QUEUE`` without the jobs ``taken``, and the parameter naming them."""
    return _PAST_TAKEN[postgres], {"taken": list(taken) if postgres else json.dumps(list(taken))}


# PostgreSQL: the queue's controls and, when they let claims take from it as they find
# its jobs (no control, or a queue-wide rate alone), its claimable jobs, in one
# statement. One row at least: the queue's (NULLs when it has none), with NULL job
# columns when no job is claimed. The jobs are read as ``CLAIMABLE_IN_QUEUE``
# reads them (the same index walk, behind a filter on the queue's row evaluated once).
_CONTROL_COLUMNS = (
    "q_name",
    "q_paused",
    "q_limit",
    "q_key_limit",
    "q_keyed",
    "q_rate",
    "q_period",
    "q_per_key",
)
CONTROLS_AND_CLAIMABLE = Prepared(
    text(
        "SELECT q.name, q.paused, q.concurrency_limit, q.key_limit, q.keyed, "
        "q.rate_count, q.rate_period_ms, q.rate_per_key, "
        + ", ".join(f"c.{column}" for column in JOB_COLUMNS)
        + " FROM (SELECT 1) AS one "
        "LEFT JOIN queues AS q ON q.name = :queue "
        "LEFT JOIN LATERAL ("
        f"SELECT jobs.* FROM jobs WHERE jobs.queue = :queue AND {CLAIMABLE_PREDICATE} AND {DUE} "
        "AND jobs.wire_name = ANY(:wire_names) "
        "AND (q.name IS NULL OR (NOT q.paused AND q.concurrency_limit IS NULL "
        "AND q.key_limit IS NULL AND NOT q.keyed AND (q.rate_count IS NULL OR NOT q.rate_per_key))) "
        "ORDER BY jobs.priority DESC, jobs.run_at_ms, jobs.id LIMIT :limit "
        "FOR UPDATE OF jobs SKIP LOCKED"
        ") AS c ON true "
        "ORDER BY c.priority DESC, c.run_at_ms, c.id"
    )
    .bindparams(bindparam("limit", type_=Integer), bindparam("now_ms", type_=BigInteger))
    .columns(*(literal_column(name) for name in (*_CONTROL_COLUMNS, *JOB_COLUMNS)))
)
CONTROLS_AND_CLAIMABLE_JOB_ID_AT = len(_CONTROL_COLUMNS) + JOB_COLUMNS.index("id")
"""Where a row of ``CONTROLS_AND_CLAIMABLE`` has its job's ID (None: no job)."""

# Which of some queues hold a claimable job that is due: one index probe per queue
# (ix_jobs_due, queue then run-at), stopping at the first job found, with the queues'
# names bound as one value (a JSON array on SQLite, an array on PostgreSQL) however many.
_WORK_IN = f"jobs.queue = {{name}} AND {CLAIMABLE_PREDICATE} AND jobs.run_at_ms <= :now_ms"
_QUEUES_WITH_WORK_SQLITE = Prepared(
    text(
        "SELECT w.value FROM json_each(:queues) AS w WHERE EXISTS "
        f"(SELECT 1 FROM jobs WHERE {_WORK_IN.format(name='w.value')})"
    )
    .bindparams(bindparam("now_ms", type_=BigInteger))
    .columns(literal_column("value"))
)
_QUEUES_WITH_WORK_POSTGRES = Prepared(
    text(
        "SELECT w.name FROM unnest(CAST(:queues AS text[])) AS w(name) CROSS JOIN LATERAL "
        f"(SELECT 1 FROM jobs WHERE {_WORK_IN.format(name='w.name')} LIMIT 1) AS found"
    )
    .bindparams(bindparam("now_ms", type_=BigInteger))
    .columns(literal_column("name"))
)


def queues_with_work(conn: Connection, postgres: bool, now_ms: int, queues: Sequence[str]) -> set[str]:
    """The queues among ``queues`` that hold a claimable job due by ``now_ms``, of any
    wire name, in one statement."""
    if not queues:
        return set()
    if postgres:
        rows = _QUEUES_WITH_WORK_POSTGRES.execute(conn, {"queues": list(queues), "now_ms": now_ms})
    else:
        rows = _QUEUES_WITH_WORK_SQLITE.execute(conn, {"queues": json.dumps(list(queues)), "now_ms": now_ms})
    return set(rows.scalars())
