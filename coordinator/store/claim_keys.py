"""Per-key running limits in a claim (docs/flow-control.md): one step of ``store.claims``.

A queue with a ``key_limit`` hands out at most that many jobs of one concurrency key
reserved or running at once. Its claims are serialised across replicas by the lock on
the queue's row (``QueueOps.lock_queues``, taken as for a queue's own limit), so the count
of each key's active jobs, read once a call after the lock (``ix_jobs_queue_key_leased``),
holds until the commit: the limit is exact on PostgreSQL under concurrent claims, as on
SQLite's single writer.

A key at its per-key *rate* (``store.claim_rates``) has no room either: the same
``KeyRoom`` keeps both, so a claim passes over such a key's jobs as over those of a key at
its limit, instead of taking them and then dropping them at the rate's step.

The jobs are read in claim order as for any queue, without the keys already at their
limit (``KeyRoom.full``), and admitted in that order while their key has room. A read
that hands a key its last slot and finds more of its jobs is read again without that key,
at most ``MAX_KEY_ROUNDS`` times a request: a claim that meets that bound hands out
fewer jobs than it could (never more than the limit), and the next claim goes on.

Each read looks at no more than ``window_rows`` jobs in claim order, whatever their
keys: a key without room whose backlog fills the front of the queue costs a claim that
many rows, not its whole backlog (a claim used to walk all of it, each row read from the
table to see its key). The keys behind such a backlog get their jobs by their turns
(``store.claim_turns``: one index probe a key, passing over a key without room in one
probe), so a claim's reads are bounded by its size and the number of keys without room,
never by the depth of a backlog.
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
WINDOW_SLACK_ROWS = 32
"""Rows a bounded read looks at beyond twice the jobs it wants (``window_rows``)."""


def window_rows(wanted: int) -> int:
    """Jobs a per-key limited read looks at, at most, to find ``wanted`` of keys with room."""
    return 2 * wanted + WINDOW_SLACK_ROWS


_ACTIVE_BY_KEY = Prepared(
    # The predicate as text, word for word, so the partial index of leased jobs serves it.
    text(
        f"SELECT concurrency_key, count(*) AS active FROM jobs WHERE queue = :queue AND {LEASED_PREDICATE} "
        "GROUP BY concurrency_key"
    ).columns(literal_column("concurrency_key"), literal_column("active"))
)


@dataclass(slots=True)
class KeyRoom:
    """One queue's keys in one ``Tx.claim`` call, for a per-key limit, a per-key rate or
    both: how many jobs of each are reserved or running (with those the call handed out
    counted in), and how many its rate counts against each (``rate_used``, the call's own
    counts, which the rate's step adds to as it admits jobs)."""

    limit: int | None
    active: dict[str, int]
    rate_count: int | None = None
    """A per-key rate's count (None: no per-key rate)."""
    rate_used: dict[str, int] = field(default_factory=dict)
    dropped: bool = field(default=False)
    """The last ``admit`` left out a job whose key had no room left."""
    _full: list[str] | None = field(default=None, repr=False)
    """``full()`` as worked out once a call and kept up by ``admit`` (a claim asks for it
    three times a read, and working it out walks every key with jobs reserved or
    running); not kept with a per-key rate, whose counts the rate's step moves. A keyed
    claim of 8 with a per-key limit took 0.274 ms of the store's time against 0.282 and
    0.294 working it out each time (benchmarks/LOG.md, 2026-12-07)."""

    def _room(self, key: str, taking: int) -> bool:
        """Whether ``key`` has room for one more job, beyond ``taking`` admitted now."""
        if self.limit is not None and self.active.get(key, 0) + taking >= self.limit:
            return False
        return self.rate_count is None or self.rate_used.get(key, 0) + taking < self.rate_count

    def full(self) -> list[str]:
        """The keys without room (at their limit or their rate), in order (bound as one
        parameter)."""
        if self._full is not None and self.rate_count is None:  # a rate's counts move outside
            return self._full
        keys = set(self.active) | set(self.rate_used)
        self._full = sorted(key for key in keys if not self._room(key, 0))
        return self._full

    def admit(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """``jobs`` in order, less those whose key has no room left; counts them in
        (against the limit; the rate's step counts what it admits itself)."""
        admitted: list[JobRecord] = []
        taking: dict[str, int] = {}
        self.dropped = False
        for job in jobs:
            key = job.concurrency_key
            if not self._room(key, taking.get(key, 0)):
                self.dropped = True
                continue
            taking[key] = taking.get(key, 0) + 1
            admitted.append(job)
        if self.limit is not None:
            for key, n in taking.items():
                self.active[key] = self.active.get(key, 0) + n
        if self._full is not None and self.rate_count is None:  # only these keys' room moved
            self._full = sorted({*self._full, *(key for key in taking if not self._room(key, 0))})
        return admitted


class ClaimKeyOps(QueueOps):
    def plan_keyed_reads(self) -> bool:
        """Makes PostgreSQL plan the rest of the transaction's statements without a sort
        where an index gives the order; True once done (SQLite: nothing to do).

        A keyed claim's reads (the bounded read, the keys' probe, their next jobs) each
        walk an index in their order and stop early. Until the jobs table has been
        analysed, the planner takes a queue's claimable jobs at one priority for a row
        or so, so a walk of ix_jobs_due (the queue's every claimable job, in run-at
        order) and a sort look as cheap as the right walk, and it chose them: every
        statement then read the queue's whole backlog (a claim of 4 behind a full key's
        10,000 jobs read 3,658 buffers, now 169, and 146 behind 50 jobs; 164 ms a claim
        of 64 on a 5,000-job queue; benchmarks/LOG.md, 2026-12-07). No shape of those
        statements helps while a sort of one row looks free; taking sorts out of the
        reckoning (``SET LOCAL``: this transaction only) leaves the walks that stop
        early, which are right whatever the statistics say. A later statement of the
        transaction that needs a sort still sorts: the setting only prices a sort out
        where another plan gives the order."""
        if self._postgres:
            self._conn.exec_driver_sql("SET LOCAL enable_sort = off")
        return True

    def key_room(
        self, queue: str, limit: int | None, rate_count: int | None, rate_used: dict[str, int]
    ) -> KeyRoom:
        """``queue``'s keys: with a per-key ``limit``, those with reserved or running jobs,
        counted (after the queue's row was locked: ``queue_controls``); with a per-key
        rate, ``rate_used`` (the call's counts, shared)."""
        active: dict[str, int] = {}
        if limit is not None:
            active = {
                str(key): int(count) for key, count in _ACTIVE_BY_KEY.execute(self._conn, {"queue": queue})
            }
        return KeyRoom(limit, active, rate_count, rate_used)

    def key_limited_read(
        self, room: KeyRoom, taken: list[str], wanted: int
    ) -> tuple[Lockable, dict[str, Any]]:
        """The statement reading a per-key limited queue's claimable jobs past ``taken``
        and without the keys with no room, looking at ``window_rows(wanted)`` jobs at
        most, with its parameters."""
        full = room.full()
        read = claimable_past_keys(self._postgres)
        bounds = {"window": window_rows(wanted)}
        if self._postgres:
            return read, {"taken": taken, "full_keys": full, **bounds}
        return read, {"taken": json.dumps(taken), "full_keys": json.dumps(full), **bounds}
