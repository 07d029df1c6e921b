"""Claims of a queue-wide rate far from its count hold the queue's row in share mode
(PostgreSQL, ``store.rate_locks``): two replicas' claims then do not wait on each other,
and the shared claims' room keeps the rate exact (the share of every other open
transaction is set aside), handing back to the exclusive lock near the count."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.service.queues import QueueService
from coordinator.store import Store
from coordinator.store.claims import ClaimWanted
from coordinator.store.rate_roomy import SHARED_GRANTS

from .harness import OPERATOR, WIRE, Harness

pytestmark = pytest.mark.postgres
HOUR_MS = 3_600_000


@pytest.fixture
def replicas(postgres_url: str) -> Iterator[list[Harness]]:
    from tests.conftest import _truncate

    _truncate(postgres_url)
    stores = [Store.open(postgres_url), Store.open(postgres_url)]
    clock = FakeClock()
    try:
        yield [Harness.build(store, clock, CoordinatorConfig()) for store in stores]
    finally:
        for store in stores:
            store.close()


def _rated_queue(harness: Harness, jobs: int, count: int) -> None:
    for start in range(0, jobs, 500):
        harness.enqueue_specs([NewJobSpec(WIRE, b"{}", queue="q") for _ in range(min(500, jobs - start))])
    QueueService(harness.store, harness.clock, CoordinatorConfig()).set_rate(
        "q", count, HOUR_MS, False, OPERATOR
    )


def test_roomy_rate_claims_of_two_replicas_do_not_wait_on_each_other(replicas: list[Harness]) -> None:
    first, second = replicas
    _rated_queue(first, 20, 1_000_000)
    for harness in replicas:  # each store's first claim is exclusive, and finds the rate roomy
        assert len(harness.claim(1, queues=("q",))) == 1

    other: list[int] = []
    with first.store.write() as tx:  # a claim holding the row, not committed yet
        held = tx.claim([ClaimWanted(("q",), (WIRE,), 2)], first.clock.now_ms())[0].jobs
        claimer = threading.Thread(target=lambda: other.append(len(second.claim(3, queues=("q",)))))
        claimer.start()
        claimer.join(60)  # an exclusive hold would keep it waiting until this block ends
        finished_while_held = not claimer.is_alive()
    claimer.join()

    assert len(held) == 2
    assert finished_while_held and other == [3]


def test_shared_claims_set_aside_the_other_transactions_share_and_hand_back(replicas: list[Harness]) -> None:
    a, b = replicas
    for harness in replicas:  # so that the arithmetic shows at a small count
        harness.store._roomy_rates.max_transactions = 2
    count = 2 * SHARED_GRANTS + 88  # 600: roomy while used + 2 * 256 <= count, up to 88 used
    _rated_queue(a, count + 100, count)

    def claim(harness: Harness) -> int:
        return len(harness.claim(128, queues=("q",)))

    got = [claim(a), claim(b), claim(b), claim(a), claim(a), claim(a), claim(a)]

    # a: exclusive (its first claim); it finds 0 used and learns "roomy". b: exclusive
    # twice (it finds 128 used: not roomy). a, still taking the rate for roomy, holds the
    # row shared and finds 384 used: it sets aside the other open transaction's 256 and
    # finds nothing left (600 - 384 - 256 < 0) where an exclusive hold has 216; it learns
    # "not roomy". Then exclusive again, up to the count and never over it.
    assert got == [128, 128, 128, 0, 128, count - 4 * 128, 0]
