"""A claim passes over the keys with no room (docs/flow-control.md), on both engines: a
key at its per-key rate is passed over like a key at its per-key limit, and however deep
the backlog such a key holds in front of the queue, a claim finds the other keys' jobs
behind it while the rows it reads stay bounded (counted by the engine itself: PostgreSQL's
buffer reads of the jobs table and its indexes in the transaction, SQLite's virtual machine steps)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.records import NewJobSpec
from coordinator.service.queues import QueueService
from coordinator.store.claims import ClaimWanted
from coordinator.store.tx import Tx

from .harness import OPERATOR, WIRE, Harness

HOUR_MS = 3_600_000


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig())


def _enqueue(harness: Harness, queue: str, key: str, n: int, priority: int = 0) -> None:
    for start in range(0, n, 500):
        specs = [
            NewJobSpec(WIRE, b"{}", queue=queue, concurrency_key=key, priority=priority)
            for _ in range(min(500, n - start))
        ]
        harness.enqueue_specs(specs)


def test_a_key_at_its_per_key_rate_is_passed_over_like_a_key_at_its_limit(harness: Harness) -> None:
    _enqueue(harness, "q", "a", 30, priority=5)
    _enqueue(harness, "q", "b", 2)
    _enqueue(harness, "q", "c", 2)
    _queues(harness).set_rate("q", 1, HOUR_MS, True, OPERATOR)

    assert [c.job.concurrency_key for c in harness.claim(1, queues=("q",))] == ["a"]
    # a's jobs come first in claim order, and a is at its rate: the claim takes the others.
    assert sorted(c.job.concurrency_key for c in harness.claim(10, queues=("q",))) == ["b", "c"]
    assert harness.claim(10, queues=("q",)) == []


def _claim_work(harness: Harness, queue: str) -> tuple[list[str], int]:
    """The keys a claim of 4 jobs of ``queue`` finds, and the work the engine did for it."""

    def claim(tx: Tx) -> tuple[list[str], int]:
        wanted = ClaimWanted((queue,), (WIRE,), 4)
        counted = _engine_work(tx)
        found = tx.claim([wanted], harness.clock.now_ms())[0].jobs
        return [job.concurrency_key for job in found], counted()

    return harness.store.transact(claim)


def _engine_work(tx: Tx) -> Callable[[], int]:
    """Starts counting what the engine does in ``tx``; the count so far, when called."""
    conn = tx._connection
    if conn.dialect.name == "postgresql":
        # Buffer reads (hits included) of the jobs table and of its indexes.
        query = (
            "SELECT sum(pg_stat_get_xact_blocks_fetched(relid)) FROM (SELECT 'jobs'::regclass AS relid "
            "UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass) AS r"
        )
        before = int(conn.exec_driver_sql(query).scalar_one())
        return lambda: int(conn.exec_driver_sql(query).scalar_one()) - before
    raw = conn.connection.driver_connection
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    raw.set_progress_handler(step, 100)

    def count() -> int:
        raw.set_progress_handler(None, 0)
        return steps[0]

    return count


@pytest.mark.parametrize("b_priority", [5, 0], ids=["same-priority", "lower-priority"])
def test_a_deep_backlog_of_a_full_key_costs_a_claim_a_bounded_read(harness: Harness, b_priority: int) -> None:
    """Key a (priority 5) fills the front of each queue, 50 jobs deep in one and 10,000 in
    the other, and is at its limit; b's jobs are behind. Both claims find b's jobs, with
    about the same work: the read does not walk a's backlog."""
    for queue, depth in (("shallow", 50), ("deep", 10_000)):
        _enqueue(harness, queue, "a", depth, priority=5)
        _enqueue(harness, queue, "b", 3, priority=b_priority)
        _queues(harness).set_key_limit(queue, 1, OPERATOR)
        assert [c.job.concurrency_key for c in harness.claim(1, queues=(queue,))] == ["a"]
    harness.store.refresh_planner_statistics()  # as a coordinator does (PostgreSQL)

    shallow_keys, shallow_work = _claim_work(harness, "shallow")
    deep_keys, deep_work = _claim_work(harness, "deep")

    assert shallow_keys == deep_keys == ["b"]  # one of b (the limit), none of a (full)
    assert deep_work < 1.5 * shallow_work + 20, (shallow_work, deep_work)
