"""A write transaction's queue operations (R-17): the queue registry, the controls
claims obey (pause, concurrency limit), and their changes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import bindparam, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from coordinator.domain.rates import QueueRate
from coordinator.domain.records import QueueRecord
from coordinator.domain.states import JobState
from coordinator.store.prepared import Prepared
from coordinator.store.rows import queue_from_row, queues_from
from coordinator.store.schema import (
    LEASED_PREDICATE,
    jobs,
    queue_count_deltas,
    queue_counts,
    queue_finished,
    queue_rate_slots,
    queues,
)
from coordinator.store.tx_queue_lifecycle import QueueLifecycleOps, positive_queues

# Statements of every claim and every write, built once (see ``tx_base.Lockable``).
_QUEUES_BY_NAMES = Prepared(select(queues).where(queues.c.name.in_(bindparam("names", expanding=True))))


class Unset:
    """The absence of a value where None is one (a limit of None removes the limit)."""


UNSET = Unset()

MINUTE_MS = 60_000
FINISHED_MINUTES_KEPT_MS = 24 * 3_600_000
"""How long the per-minute counts of ended jobs are kept (``queue_finished``)."""
_TERMINAL = frozenset(state.value for state in JobState if state.terminal)


def _insert_counts(postgres: bool) -> Any:
    """An INSERT of zero counts that skips rows another fold added meanwhile."""
    if postgres:
        return postgresql_insert(queue_counts).on_conflict_do_nothing(index_elements=["queue", "state"])
    return sqlite_insert(queue_counts).on_conflict_do_nothing(index_elements=["queue", "state"])


class QueueOps(QueueLifecycleOps):
    # -- queues (R-17) ------------------------------------------------------------------

    def queue_controls(self, names: Iterable[str]) -> dict[str, QueueRecord]:
        """The known queues among ``names``; the rows of those with a concurrency limit, a
        per-key limit or a rate are locked (PostgreSQL), so claims of a limited or rated
        queue are serialised across replicas."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        found = {
            record.name: record
            for record in queues_from(_QUEUES_BY_NAMES.execute(self._conn, {"names": wanted}))
        }
        self.lock_queues(name for name, record in found.items() if not record.free and not record.paused)
        return found

    def lock_queues(self, names: Iterable[str]) -> None:
        """Locks the rows of queues ``names`` (PostgreSQL; in name order, so two
        transactions never wait on each other's): a limited queue's claims are so
        serialised across replicas, and its count of active jobs holds until the commit."""
        wanted = sorted(set(names))
        if wanted and self._postgres:
            self._conn.execute(
                select(queues.c.name)
                .where(queues.c.name.in_(wanted))
                .order_by(queues.c.name)
                .with_for_update()
            )

    def count_jobs(self, deltas: Mapping[tuple[str, str], int]) -> None:
        """Records how this transaction changed the jobs per (queue, state). They are
        summed and appended as deltas once, before the commit (``write_counts``), so
        concurrent transactions never wait on a counter row and an enqueue that also
        claims writes one statement for both."""
        self._counts.update(deltas)

    def write_counts(self) -> None:
        """Appends the deltas counted so far (``Store`` calls it before every commit)."""
        rows = [{"queue": q, "state": s, "delta": d} for (q, s), d in sorted(self._counts.items()) if d]
        self._counts.clear()
        self._insert_rows(queue_count_deltas, rows)

    def fold_queue_counts(self, now_ms: int | None = None) -> int:
        """Folds the deltas appended so far into ``queue_counts`` and returns how many it
        folded. Deletes exactly the rows it adds (DELETE ... RETURNING), so a delta that
        commits meanwhile is folded next time, never lost.

        With ``now_ms``, the jobs that ended (each transaction's positive delta of a
        terminal state; a retry or a purge takes jobs out, and counts no end) are also
        added to ``now_ms``'s minute of ``queue_finished``, and minutes older than
        ``FINISHED_MINUTES_KEPT_MS`` are dropped."""
        self.write_counts()  # this transaction's own deltas are folded too
        deltas: Counter[tuple[str, str]] = Counter()
        ended: Counter[tuple[str, str]] = Counter()
        folded = 0
        returning = queue_count_deltas.delete().returning(
            queue_count_deltas.c.queue, queue_count_deltas.c.state, queue_count_deltas.c.delta
        )
        for queue, state, delta in self._conn.execute(returning):
            deltas[(queue, state)] += delta
            if delta > 0 and state in _TERMINAL:
                ended[(queue, state)] += delta
            folded += 1
        if now_ms is not None:
            self._count_finished(ended, now_ms)
            self.restore_queues(positive_queues(deltas), now_ms)
        changed = [{"q": q, "s": s, "d": d} for (q, s), d in sorted(deltas.items()) if d]
        if changed:
            known = {
                (row[0], row[1])
                for row in self._conn.execute(
                    select(queue_counts.c.queue, queue_counts.c.state).where(
                        queue_counts.c.queue.in_(sorted({c["q"] for c in changed}))
                    )
                )
            }
            missing = [
                {"queue": c["q"], "state": c["s"], "count": 0}
                for c in changed
                if (c["q"], c["s"]) not in known
            ]
            if missing:
                self._conn.execute(_insert_counts(self._postgres), missing)
            self._conn.execute(
                update(queue_counts)
                .where(queue_counts.c.queue == bindparam("q"), queue_counts.c.state == bindparam("s"))
                .values(count=queue_counts.c.count + bindparam("d")),
                changed,
            )
        return folded

    def _count_finished(self, ended: Mapping[tuple[str, str], int], now_ms: int) -> None:
        minute = now_ms - now_ms % MINUTE_MS
        self._conn.execute(
            queue_finished.delete().where(queue_finished.c.minute_ms < minute - FINISHED_MINUTES_KEPT_MS)
        )
        if not ended:
            return
        keys = sorted(ended)
        if self._postgres:
            statement = postgresql_insert(queue_finished)
            upsert: Any = statement.on_conflict_do_update(
                index_elements=["minute_ms", "queue", "state"],
                set_={"count": queue_finished.c.count + statement.excluded.count},
            )
        else:
            sqlite_statement = sqlite_insert(queue_finished)
            upsert = sqlite_statement.on_conflict_do_update(
                index_elements=["minute_ms", "queue", "state"],
                set_={"count": queue_finished.c.count + sqlite_statement.excluded.count},
            )
        self._conn.execute(
            upsert, [{"minute_ms": minute, "queue": q, "state": s, "count": ended[(q, s)]} for q, s in keys]
        )

    def active_jobs(self, queue: str, cap: int) -> int:
        """Jobs of ``queue`` reserved or running, counted up to ``cap``."""
        inner = (
            select(literal(1))
            # The predicate as text, word for word: only then may a planner use the partial
            # index of leased jobs (bound parameters imply nothing).
            .where(jobs.c.queue == queue, text(LEASED_PREDICATE))
            .limit(cap)
            .subquery()
        )
        return int(self._conn.execute(select(func.count()).select_from(inner)).scalar_one())

    def set_queue_controls(
        self,
        name: str,
        now_ms: int,
        *,
        paused: bool | None = None,
        limit: int | Unset | None = UNSET,
        key_limit: int | Unset | None = UNSET,
        rate: QueueRate | Unset | None = UNSET,
    ) -> QueueRecord | None:
        """Changes a known queue's controls; None when it is not known. A rate removed
        takes its counted starts with it; a rate changed keeps them (they are starts
        made, and a new rate must not grant a fresh burst)."""
        values: dict[str, Any] = {"updated_at_ms": now_ms}
        if paused is not None:
            values["paused"] = paused
        if not isinstance(limit, Unset):
            values["concurrency_limit"] = limit
        if not isinstance(key_limit, Unset):
            values["key_limit"] = key_limit
        if not isinstance(rate, Unset):
            values["rate_count"] = rate.count if rate else None
            values["rate_period_ms"] = rate.period_ms if rate else None
            values["rate_per_key"] = rate.per_key if rate else False
            self.rates_seen[name] = rate is not None
            if rate is None:
                self._conn.execute(queue_rate_slots.delete().where(queue_rate_slots.c.queue == name))
        if self._conn.execute(update(queues).where(queues.c.name == name).values(values)).rowcount != 1:
            return None
        row = self._conn.execute(select(queues).where(queues.c.name == name)).first()
        return queue_from_row(row) if row is not None else None
