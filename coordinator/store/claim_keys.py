"""Per-key running limits in a claim (docs/flow-control.md): one step of ``store.claims``.

A queue with a ``key_limit`` hands out at most that many jobs of one concurrency key
reserved or running at once. Its claims are serialised across replicas by the lock on
the queue's row (``QueueOps.lock_queues``, taken as for a queue's own limit), so the count
of each key's active jobs, read once a call after the lock (``ix_jobs_queue_key_leased``),
holds until the commit: the limit is exact on PostgreSQL under concurrent claims, as on
SQLite's single writer.

The jobs are read in claim order as for any queue, without the keys already at their
limit (``KeyRoom.full``), and admitted in that order while their key has room. A read
that hands a key its last slot and finds more of its jobs is read again without that key,
at most ``MAX_KEY_ROUNDS`` times a request: a claim that meets that bound hands out
fewer jobs than it could (never more than the limit), and the next claim goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import literal_column, text

from coordinator.domain.records import JobRecord
from coordinator.store.claim_reads import claimable_past_keys
from coordinator.store.prepared import Prepared
from coordinator.store.schema import LEASED_PREDICATE
from coordinator.store.tx_base import Lockable
from coordinator.store.tx_queues import QueueOps

MAX_KEY_ROUNDS = 8
"""Reads of one request's jobs of a per-key limited queue, at most (see the module)."""

_ACTIVE_BY_KEY = Prepared(
    # The predicate as text, word for word, so the partial index of leased jobs serves it.
    text(
        f"SELECT concurrency_key, count(*) AS active FROM jobs WHERE queue = :queue AND {LEASED_PREDICATE} "
        "GROUP BY concurrency_key"
    ).columns(literal_column("concurrency_key"), literal_column("active"))
)


@dataclass(slots=True)
class KeyRoom:
    """One per-key limited queue's keys in one ``Tx.claim`` call: how many jobs of each
    are reserved or running, with those the call handed out counted in."""

    limit: int
    active: dict[str, int]
    dropped: bool = field(default=False)
    """The last ``admit`` left out a job whose key had no room left."""

    def full(self) -> list[str]:
        """The keys at their limit, in order (bound as one parameter)."""
        return sorted(key for key, count in self.active.items() if count >= self.limit)

    def admit(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """``jobs`` in order, less those whose key has no room left; counts them in."""
        admitted: list[JobRecord] = []
        self.dropped = False
        for job in jobs:
            count = self.active.get(job.concurrency_key, 0)
            if count >= self.limit:
                self.dropped = True
                continue
            self.active[job.concurrency_key] = count + 1
            admitted.append(job)
        return admitted


class ClaimKeyOps(QueueOps):
    def key_room(self, queue: str, limit: int) -> KeyRoom:
        """``queue``'s keys with reserved or running jobs, counted (after the queue's
        row was locked: ``queue_controls``)."""
        rows = _ACTIVE_BY_KEY.execute(self._conn, {"queue": queue})
        return KeyRoom(limit, {str(key): int(count) for key, count in rows})

    def key_limited_read(self, room: KeyRoom, taken: list[str]) -> tuple[Lockable, dict[str, Any]]:
        """The statement reading a per-key limited queue's claimable jobs past ``taken``
        and without the keys at their limit, with its parameters."""
        full = room.full()
        read = claimable_past_keys(self._postgres)
        if self._postgres:
            return read, {"taken": taken, "full_keys": full}
        return read, {"taken": json.dumps(taken), "full_keys": json.dumps(full)}
