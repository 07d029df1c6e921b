"""A keyed claim's reads do not depend on the planner's statistics (docs/flow-control.md),
on both engines: in a new database whose jobs table was never analysed (autovacuum off on
PostgreSQL, so it cannot analyse it meanwhile), a claim behind a deep backlog of a key at
its limit does about the work of one behind a shallow backlog. PostgreSQL planned the
keys' probe, without statistics, as a walk of the queue's whole backlog at the best
priority (164 ms a claim of 64 on 5,000 jobs); SQLite keeps no statistics the store
relies on, and is checked the same way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.service.queues import QueueService
from coordinator.store import Store

from .harness import OPERATOR, WIRE, Harness
from .test_key_room_reads import _claim_work


@pytest.fixture
def fresh(unmigrated_url: str, clock: FakeClock) -> Iterator[Harness]:
    """A harness over a new database, migrated, whose jobs table nothing will analyse."""
    store = Store.open(unmigrated_url, create=True)
    if unmigrated_url.startswith("postgresql"):
        engine = create_engine(unmigrated_url)
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        engine.dispose()
    yield Harness.build(store, clock, CoordinatorConfig())
    store.close()


def _enqueue(harness: Harness, queue: str, keys: list[str], per_key: int) -> None:
    specs = [
        NewJobSpec(WIRE, b"{}", queue=queue, concurrency_key=key, priority=5)
        for key in keys
        for _ in range(per_key)
    ]
    for start in range(0, len(specs), 500):
        harness.enqueue_specs(specs[start : start + 500])


def _never_analysed(harness: Harness) -> bool:
    def read(tx: object) -> bool:
        conn = tx._connection  # type: ignore[attr-defined]
        if conn.dialect.name != "postgresql":
            return True
        query = "SELECT count(*) FROM pg_stats WHERE tablename = 'jobs'"
        return int(conn.exec_driver_sql(query).scalar_one()) == 0

    return bool(harness.store.transact(read))


def test_a_keyed_claim_on_a_table_never_analysed_does_not_walk_a_full_keys_backlog(fresh: Harness) -> None:
    """Key a fills the front of each queue, 50 jobs deep in one and 10,000 in the other,
    and is at its limit; 20 keys with 2 jobs each are behind it, at the same priority."""
    others = [f"k{n:02}" for n in range(20)]
    for queue, depth in (("shallow", 50), ("deep", 10_000)):
        _enqueue(fresh, queue, ["a"], depth)
        _enqueue(fresh, queue, others, 2)
        QueueService(fresh.store, fresh.clock, CoordinatorConfig()).set_key_limit(queue, 1, OPERATOR)
        assert [c.job.concurrency_key for c in fresh.claim(1, queues=(queue,))] == ["a"]
    assert _never_analysed(fresh)

    shallow_keys, shallow_work = _claim_work(fresh, "shallow")
    deep_keys, deep_work = _claim_work(fresh, "deep")

    assert shallow_keys == deep_keys == others[:4]  # a turn each for the first keys, none for a
    assert deep_work < 1.5 * shallow_work + 20, (shallow_work, deep_work)
    assert _never_analysed(fresh)
