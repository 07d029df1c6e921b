"""A write transaction's queue lifecycle: a queue is created by the first enqueue to it
(at most ``StoreBounds.max_queues`` of them), and forgotten once it holds no jobs, by
retention (those without controls) or by an operator.

The bound is exact on PostgreSQL with any number of replicas: every transaction that
creates a queue takes one advisory lock first (held to its commit) and only then counts
the queues, so creations are serialised and each count sees the ones before it. Only
an enqueue that creates a queue takes the lock; one to a queue this store has seen
within ``KNOWN_QUEUES_TTL_S`` does not even look it up.

Deleting a queue row can race with an enqueue to it on another replica that still
believes the queue exists (each store caches the names it has seen, for at most
``KNOWN_QUEUES_TTL_S``): that job's count delta then names a queue without a row, and
the next count fold restores the row (``restore_queues``), so the queue is missing from
listings until that fold at most. Restoring is not bounded (the jobs exist), so the
queues can pass ``max_queues`` by those deleted elsewhere within that time and enqueued
to again; creations are refused until they are back under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import case, exists, func, literal, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from coordinator.domain.naming import natural_key
from coordinator.domain.records import QueueRecord
from coordinator.domain.states import JobState
from coordinator.store.errors import QueueLimitReached
from coordinator.store.rows import queue_from_row
from coordinator.store.schema import jobs, queue_count_deltas, queue_counts, queue_rate_slots, queues
from coordinator.store.tx_base import TxBase

QUEUE_CREATION_LOCK_KEY = int.from_bytes(b"rwqueues", "big")
"""The PostgreSQL advisory lock every queue-creating transaction holds to its commit."""
KNOWN_QUEUES_TTL_S = 60.0
"""How long a store trusts the queue names it has seen (``Store``): a queue another
replica deleted is looked up again at most this much later."""


def _insert_ignoring_duplicates(postgres: bool) -> Any:
    """An INSERT into ``queues`` that skips names another transaction added meanwhile."""
    if postgres:
        return postgresql_insert(queues).on_conflict_do_nothing(index_elements=["name"])
    return sqlite_insert(queues).on_conflict_do_nothing(index_elements=["name"])


def _new_rows(names: Iterable[str], now_ms: int) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "paused": False,
            "concurrency_limit": None,
            "key_limit": None,
            "keyed": False,
            "created_at_ms": now_ms,
            "updated_at_ms": now_ms,
            "sort_key": natural_key(name),
        }
        for name in names
    ]


class QueueLifecycleOps(TxBase):
    def register_queues(self, names: Iterable[str], now_ms: int) -> None:
        """Makes ``names`` known queues (a no-op for those that are). Raises
        QueueLimitReached, before writing anything, when the new ones would take the
        deployment past ``max_queues``. A name this store saw committed is not looked up
        again (a queue this store deletes is dropped from that set)."""
        wanted = sorted(set(names) - self._known_queues)
        if not wanted:
            return
        existing = self._existing_queues(wanted)
        new = [name for name in wanted if name not in existing]
        if new:
            # Only an enqueue that makes a queue takes the lock, and counts under it.
            self._lock_queue_creation()
            self._check_queue_room(new)
            self._conn.execute(_insert_ignoring_duplicates(self._postgres), _new_rows(new, now_ms))
        self.registered_queues.update(wanted)

    def mark_keyed_queues(self, names: Iterable[str]) -> None:
        """Marks ``names`` as queues where jobs with concurrency keys were enqueued, so their
        claims take keys in turn (``store.claim_turns``). Updates only queues not marked
        yet: a marked queue's row is neither written nor locked."""
        wanted = sorted(set(names))
        if wanted:
            self._conn.execute(
                update(queues).where(queues.c.name.in_(wanted), queues.c.keyed.is_(False)).values(keyed=True)
            )

    def _existing_queues(self, names: list[str]) -> set[str]:
        return {row[0] for row in self._conn.execute(select(queues.c.name).where(queues.c.name.in_(names)))}

    def _lock_queue_creation(self) -> None:
        if self._postgres:
            self._conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": QUEUE_CREATION_LOCK_KEY})

    def _check_queue_room(self, new: list[str]) -> None:
        limit = self.bounds.max_queues
        # Those of ``new`` another replica made since the lookup above (this one waited for
        # the lock) are counted once: after the insert there are exactly known + new.
        made_meanwhile = func.coalesce(func.sum(case((queues.c.name.in_(new), 1), else_=0)), 0)
        total, meanwhile = self._conn.execute(select(func.count(), made_meanwhile).select_from(queues)).one()
        known = int(total) - int(meanwhile)
        if known + len(new) > limit:
            first = new[0]
            raise QueueLimitReached(
                f"queue {first!r} is new and the deployment already has {known} of at most {limit} "
                f"queues (max_queues); nothing was enqueued. Enqueue to an existing queue, delete "
                "unused ones (runwick queues delete NAME) or raise --max-queues",
                metadata={"queue": first, "queues": known, "max_queues": limit},
            )

    def restore_queues(self, names: Iterable[str], now_ms: int) -> None:
        """Recreates the rows of ``names`` that are missing: queues deleted while a job was
        being enqueued to them (see the module's docstring). Not bounded: it only undoes
        a delete."""
        wanted = sorted(set(names))
        if not wanted:
            return
        existing = self._existing_queues(wanted)
        missing = [name for name in wanted if name not in existing]
        if missing:
            self._conn.execute(_insert_ignoring_duplicates(self._postgres), _new_rows(missing, now_ms))

    # -- forgetting queues ---------------------------------------------------------------

    def lock_queue(self, name: str) -> QueueRecord | None:
        """The queue ``name``, its row locked (PostgreSQL); None when it is not known."""
        row = self._conn.execute(self._locked(select(queues).where(queues.c.name == name))).first()
        return queue_from_row(row) if row is not None else None

    def queue_job_counts(self, name: str) -> dict[JobState, int]:
        """The committed jobs of queue ``name`` per state (the maintained counts plus the
        deltas not folded yet; no scan of the jobs). States without jobs are left out."""
        counts: dict[JobState, int] = {}
        folded = select(queue_counts.c.state, queue_counts.c.count).where(queue_counts.c.queue == name)
        pending = select(queue_count_deltas.c.state, queue_count_deltas.c.delta).where(
            queue_count_deltas.c.queue == name
        )
        rows = [*self._conn.execute(folded), *self._conn.execute(pending)]
        for state, count in rows:
            counts[JobState(state)] = counts.get(JobState(state), 0) + int(count)
        return {state: count for state, count in counts.items() if count}

    def queue_has_jobs(self, name: str) -> bool:
        """Whether any job of ``name`` exists (one probe of the queue's index)."""
        probe = select(literal(1)).where(jobs.c.queue == name).limit(1)
        return self._conn.execute(probe).first() is not None

    def delete_queues(self, names: Iterable[str]) -> None:
        """Deletes the rows of queues ``names`` and their job counts. The caller made sure
        they hold no jobs, so their counts sum to zero and nothing is lost."""
        wanted = sorted(set(names))
        if not wanted:
            return
        for table in (queue_count_deltas, queue_counts, queue_rate_slots):
            self._conn.execute(table.delete().where(table.c.queue.in_(wanted)))
        self._conn.execute(queues.delete().where(queues.c.name.in_(wanted)))
        self.forgotten_queues.update(wanted)
        self.registered_queues.difference_update(wanted)

    def forget_idle_queues(self, limit: int) -> list[str]:
        """Deletes up to ``limit`` queues that hold no jobs and have no controls (not
        paused, no concurrency limit, no rate), by name; returns their names. Rows another
        transaction holds are skipped (PostgreSQL), so replicas never wait on each other."""
        idle = (
            select(queues.c.name)
            .where(
                queues.c.paused.is_(False),
                queues.c.concurrency_limit.is_(None),
                queues.c.key_limit.is_(None),
                queues.c.rate_count.is_(None),
                ~exists(select(literal(1)).where(jobs.c.queue == queues.c.name)),
            )
            .order_by(queues.c.name)
            .limit(limit)
        )
        names = [row[0] for row in self._conn.execute(self._locked(idle, skip_locked=True))]
        self.delete_queues(names)
        return names

    def key_unkeyed_queues(self, limit: int) -> int:
        """Gives up to ``limit`` queues without a sort key theirs; returns how many. Only
        a coordinator of before migration 0020, still running in a rolling upgrade, makes
        such rows (the column's default is empty); until keyed they list first."""
        names = [row[0] for row in self._conn.execute(_unkeyed().limit(limit))]
        for name in names:
            self._conn.execute(
                queues.update().where(queues.c.name == name).values(sort_key=natural_key(name))
            )
        return len(names)


def _unkeyed() -> Any:
    return select(queues.c.name).where(queues.c.sort_key == "").order_by(queues.c.name)


def positive_queues(deltas: Mapping[tuple[str, str], int]) -> set[str]:
    """The queues some of whose jobs entered a state: they hold jobs, so must have rows."""
    return {queue for (queue, _), delta in deltas.items() if delta > 0}
