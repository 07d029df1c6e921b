"""Which lock a claim takes on a rated queue's row (PostgreSQL, issue 41): exclusive, or
shared while the queue's rate is far from its count.

A claim of a limited or rated queue locks the queue's row from its reads to its commit,
so that replicas count one window in turn (``store.claim_rates``). For a queue whose one
control is a queue-wide rate, that serialised every claim of the queue, an enqueue's
claim for waiting workers too, behind the batch in flight even when the rate was nowhere
near binding (a rate of 1,000,000/1s cost PostgreSQL 0.76x of the throughput and took
p50 enqueue-to-start from 6 to 43 ms, benchmarks/LOG.md, 2026-12-06).

**Shared mode.** While the queue's counted starts and reserved jobs (``used``) are far
below its count, its claims take the row ``FOR SHARE`` instead: they do not wait on each
other. Each such transaction hands out at most ``SHARED_GRANTS`` jobs of the queue, and
only while ``used + (T - 1) * SHARED_GRANTS + its grants <= count``, where T bounds the
transactions open at once on the server (``max_connections`` plus
``max_prepared_transactions``), and ``used`` is read after the lock is held.

**Why it stays exact across replicas.** An exclusive (``FOR UPDATE``) claim waits for
every shared holder to commit and none can start while it holds the row, so it reads
every grant made before it, as before. Take the claim that read ``used`` last, at time
t: every claim that committed before t is in its ``used``; every other claim still open
at t is one of at most T - 1 open transactions, each shared (an exclusive one would
exclude it) and so granting at most ``SHARED_GRANTS``; and no claim reads after t. So
the grants of all of them together are at most ``used + (T - 1) * SHARED_GRANTS + its
own grants``, which its check kept within the count; and as an exclusive claim checks
``used + its grants`` with nothing open beside it, the bound holds at every moment, for
any number of replicas. A transaction that claims twice reads its own first grants in
``used`` (the reserved jobs it wrote are visible to it).

**When.** Each store remembers per queue whether its last claim found the rate roomy
(``used + T * SHARED_GRANTS <= count``: the next shared claim would have its full
``SHARED_GRANTS``); the first claim of a queue, and every claim after one that found it
not roomy, is exclusive. A shared claim that finds less room than that hands out what
there is, learns "not roomy", and asks its workers to claim again at once (the next
claim is exclusive). A rate whose count is below ``T * SHARED_GRANTS`` (25,600 with
PostgreSQL's default 100 connections) is never shared: its claims are exclusive as
before. SQLite has one writer: no lock, no change.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import text

from coordinator.domain.records import QueueRecord
from coordinator.store.rate_roomy import SHARED_GRANTS
from coordinator.store.tx_queues import QueueOps


def may_share(queue: QueueRecord) -> bool:
    """Whether claims of ``queue`` may hold its row in share mode: its one control is a
    queue-wide rate (a concurrency limit, a per-key limit or rate count per job or key,
    under the exclusive lock)."""
    return (
        queue.rate_count is not None
        and not queue.rate_per_key
        and queue.concurrency_limit is None
        and queue.key_limit is None
        and not queue.paused
    )


def shared_room(count: int, used: int, max_transactions: int) -> int:
    """What a claim holding the row in share mode may hand out (see the module)."""
    return max(0, min(SHARED_GRANTS, count - used - (max_transactions - 1) * SHARED_GRANTS))


def roomy(count: int, used: int, max_transactions: int) -> bool:
    """Whether a shared claim would have its full ``SHARED_GRANTS`` with ``used`` counted."""
    return used + max_transactions * SHARED_GRANTS <= count


class RateLockOps(QueueOps):
    def lock_for_claims(self, records: Iterable[QueueRecord]) -> None:
        """Locks the rows of the limited and rated queues among ``records`` for a claim:
        shared for a roomy queue-wide rate (PostgreSQL, see the module), else exclusive.
        In name order, one statement a queue when the modes mix, so that two claims never
        wait on each other's."""
        locked = sorted((r for r in records if not r.free and not r.paused), key=lambda r: r.name)
        if not locked or not self._postgres:
            return
        shared = {r.name for r in locked if may_share(r) and self.roomy_rates.roomy(r.name)}
        self.shared_rate_locks.update(shared)
        if not shared:
            self.lock_queues(r.name for r in locked)
            return
        for record in locked:
            self.lock_queues([record.name], shared=record.name in shared)

    def rate_lock_room(self, queue: QueueRecord, used: int, room: int) -> tuple[int, bool]:
        """A queue-wide rate's room for this claim given how its row is held, and whether
        a shared hold found less room than an exclusive one should look for."""
        if not self._postgres or not may_share(queue) or queue.rate_count is None:
            return room, False
        bound = self._max_transactions()
        self.roomy_rates.learn(queue.name, roomy(queue.rate_count, used, bound))
        if queue.name not in self.shared_rate_locks:
            return room, False
        shared = min(room, shared_room(queue.rate_count, used, bound))
        return shared, shared < min(room, SHARED_GRANTS)

    def _max_transactions(self) -> int:
        if self.roomy_rates.max_transactions is None:
            self.roomy_rates.max_transactions = int(
                self._conn.execute(
                    text(
                        "SELECT current_setting('max_connections')::int "
                        "+ current_setting('max_prepared_transactions')::int"
                    )
                ).scalar_one()
            )
        return self.roomy_rates.max_transactions
