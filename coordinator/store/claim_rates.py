"""A claim's rate limits (issue 41): how many jobs a rated queue may still hand out now,
and the starts its rate counts, in ``queue_rate_slots`` (``domain.rates``).

What counts against a rate at a moment is every start still in its window and every
claim not started yet (a reserved job may start at any moment of its lease). So a claim
is admitted only while starts counted plus reserved jobs plus itself stay within the
count; a start moves its job from the reserved to the counted starts (the sum does not
change), and a claim released or lapsed unstarted leaves the reserved jobs and gives its
room back. No window of starts can then hold more than the count.

A claim of a rated queue holds the queue's row lock (PostgreSQL, ``QueueOps.lock_queues``)
from its reads to its commit, so replicas' claims of the queue count in turn. A start
does not take the lock: it adds to its slot's counter (an upsert), and a claim reads the
reserved jobs and the starts in one statement on PostgreSQL (one snapshot: a start is
counted in one of the two); elsewhere the reserved jobs first, so a start committing
between the two reads would be counted twice (the safe way), never missed. The counts
are rows of the database: a restart grants nothing afresh.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from sqlalchemy import BigInteger, Connection, bindparam, func, select, text

from coordinator.domain.rates import SLOTS_PER_PERIOD, QueueRate
from coordinator.domain.records import JobRecord, QueueRecord
from coordinator.domain.states import JobState
from coordinator.store.schema import LEASED_PREDICATE, jobs, queue_rate_slots
from coordinator.store.tx_base import TxBase


def key_of(job: JobRecord) -> str:
    """The key a per-key rate counts ``job`` under: its concurrency key ('' is the
    implicit key of every job enqueued without one), as ``_reserved_by_key`` groups."""
    return job.concurrency_key


def rate_of(queue: QueueRecord) -> QueueRate | None:
    """The queue's rate, None when it has none."""
    if queue.rate_count is None or queue.rate_period_ms is None:
        return None
    return QueueRate(queue.rate_count, queue.rate_period_ms, queue.rate_per_key)


# One statement counts a batch's starts of any queues: only rows of rated queues are
# inserted (the SELECT finds no row for another), in the slot of the queue's own width
# (``QueueRate.slot_ms`` in SQL), added to the counter another start made first.
_SLOT_MS = (
    f"(CASE WHEN q.rate_period_ms >= {SLOTS_PER_PERIOD} "
    f"THEN q.rate_period_ms / {SLOTS_PER_PERIOD} ELSE 1 END)"
)
_COUNT_STARTS = text(
    "INSERT INTO queue_rate_slots (queue, key, slot_ms, granted) "
    f"SELECT q.name, :key, :now_ms - (:now_ms % {_SLOT_MS}), :n FROM queues AS q "
    "WHERE q.name = :queue AND q.rate_count IS NOT NULL "
    "ON CONFLICT (queue, key, slot_ms) DO UPDATE SET granted = queue_rate_slots.granted + excluded.granted"
).bindparams(bindparam("now_ms", type_=BigInteger))


def counted_against_rate(conn: Connection, queue: str, rate: QueueRate, now_ms: int) -> dict[str, int]:
    """What counts against ``queue``'s rate at ``now_ms``, per concurrency key (all under
    '' for a queue-wide rate): its reserved jobs, then its starts still in the window
    (read in that order: see the module's text)."""
    used = Counter(_reserved_by_key(conn, queue))
    table = queue_rate_slots
    rows = conn.execute(
        select(table.c.key, func.sum(table.c.granted))
        .where(table.c.queue == queue, table.c.slot_ms > rate.counted_since(now_ms))
        .group_by(table.c.key)
    )
    used.update({key: int(total) for key, total in rows})
    return _by_key(used, rate)


def _by_key(used: Counter[str], rate: QueueRate) -> dict[str, int]:
    if not rate.per_key:  # starts and claims are kept per key; a queue-wide rate counts all under ''
        total = sum(used.values())
        return {"": total} if total else {}
    return dict(used)


def _reserved_by_key(conn: Connection, queue: str) -> dict[str, int]:
    # The predicate as text, word for word: only then may a planner use the partial
    # index of leased jobs (ix_jobs_queue_key_leased). Grouped by the key ``key_of`` gives.
    rows = conn.execute(
        select(jobs.c.concurrency_key, func.count())
        .where(jobs.c.queue == queue, text(LEASED_PREDICATE), jobs.c.state == JobState.RESERVED.value)
        .group_by(jobs.c.concurrency_key)
    )
    return {key: int(count) for key, count in rows if count}


# PostgreSQL: a claim's three rate statements (the slots no longer counted deleted, the
# reserved jobs, the starts in the window) as one round trip. One snapshot serves both
# reads, so a start committing meanwhile is counted once, in one of them, never missed;
# the DELETE's rows are outside the window the SELECT sums. Three round trips were half
# of what a rated queue's claim added to its transaction over a free queue's.
_USED_AND_PRUNED = text(
    "WITH pruned AS (DELETE FROM queue_rate_slots WHERE queue = :queue AND slot_ms <= :since) "
    "SELECT jobs.concurrency_key, count(*) FROM jobs "
    f"WHERE jobs.queue = :queue AND {LEASED_PREDICATE} AND jobs.state = :reserved "
    "GROUP BY jobs.concurrency_key "
    "UNION ALL SELECT s.key, sum(s.granted) FROM queue_rate_slots AS s "
    "WHERE s.queue = :queue AND s.slot_ms > :since GROUP BY s.key"
).bindparams(bindparam("since", type_=BigInteger))


class RateOps(TxBase):
    def rate_used(self, queue: str, rate: QueueRate, now_ms: int) -> dict[str, int]:
        """What counts against ``queue``'s rate now, per key (``counted_against_rate``);
        rows no longer counted are deleted first (they never count again)."""
        table = queue_rate_slots
        since = rate.counted_since(now_ms)
        if not self._postgres:
            self._conn.execute(table.delete().where(table.c.queue == queue, table.c.slot_ms <= since))
            return counted_against_rate(self._conn, queue, rate, now_ms)
        params = {"queue": queue, "since": since, "reserved": JobState.RESERVED.value}
        used: Counter[str] = Counter()
        for key, count in self._conn.execute(_USED_AND_PRUNED, params):
            used[key] += int(count)
        return _by_key(used, rate)

    def count_rate_starts(self, starts: Sequence[tuple[str, str, int]]) -> None:
        """Counts ``starts`` (queue, key, when) against their queues' rates; starts of
        queues without a rate are not written, and those of queues this transaction or
        the store lately saw without one are not even sent (``store.rate_cache``)."""
        counted = Counter(start for start in starts if not self._seen_unrated(start[0]))
        if counted:
            self._conn.execute(
                _COUNT_STARTS,
                [{"queue": q, "key": k, "now_ms": at, "n": n} for (q, k, at), n in sorted(counted.items())],
            )

    def _seen_unrated(self, queue: str) -> bool:
        seen = self.rates_seen.get(queue)
        if seen is not None:
            return not seen
        return self._unrated_queues is not None and self._unrated_queues.unrated(queue)

    def forget_rate_counts(self, queues: Iterable[str]) -> None:
        """Drops the counted starts of ``queues``."""
        wanted = sorted(set(queues))
        if wanted:
            self._conn.execute(queue_rate_slots.delete().where(queue_rate_slots.c.queue.in_(wanted)))
