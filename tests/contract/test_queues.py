"""Queue controls (R-17) on both engines: a paused queue hands out no claims, a
concurrency limit holds however many workers (and replicas) claim at once, listings
count per state without scanning, and every change is audited."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument, NotFound
from coordinator.service.queues import QueueService
from coordinator.service.work import ClaimRequest, WorkBatch
from coordinator.store import Store

from .harness import LEASE_MS, OPERATOR, WIRE, Harness


def _queues(harness: Harness, **config: object) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig(**config))  # type: ignore[arg-type]


def test_a_paused_queue_hands_out_no_claims_and_its_running_jobs_finish(harness: Harness) -> None:
    queues = _queues(harness)
    running = harness.run(harness.enqueue(queue="q"))
    waiting = harness.enqueue(queue="q")

    record, effects = queues.pause("q", OPERATOR)

    assert record.paused and not effects.available_changed
    assert harness.claim(5, queues=("q",)) == []
    assert harness.report(running.attempt_id, Outcome.SUCCEEDED).accepted
    record, effects = queues.resume("q", OPERATOR)
    assert not record.paused and effects.available_changed
    assert [c.job.id for c in harness.claim(5, queues=("q",))] == [waiting]


def test_a_pause_holds_for_one_queue_only(harness: Harness) -> None:
    harness.enqueue(queue="q")
    other = harness.enqueue(queue="other")
    _queues(harness).pause("q", OPERATOR)
    assert [c.job.id for c in harness.claim(5, queues=("q", "other"))] == [other]


def test_a_concurrency_limit_caps_reserved_and_running_jobs_of_the_queue(harness: Harness) -> None:
    queues = _queues(harness)
    ids = [harness.enqueue(queue="q") for _ in range(5)]
    queues.set_limit("q", 2, OPERATOR)

    requests = [ClaimRequest(f"w{n}", ("q",), (WIRE,), 2, LEASE_MS) for n in range(3)]
    claimed = [c for batch in harness.ops.process(WorkBatch(claims=requests)).claims for c in batch]

    assert len(claimed) == 2
    assert harness.claim(5, queues=("q",), worker_id="w9") == []
    first = claimed[0]
    assert harness.start(first.attempt_id).granted
    assert harness.report(first.attempt_id, Outcome.SUCCEEDED).accepted
    assert len(harness.claim(5, queues=("q",), worker_id="w9")) == 1  # one slot came free
    queues.set_limit("q", None, OPERATOR)
    assert len(harness.claim(5, queues=("q",), worker_id="w9")) == 2  # the rest, no limit
    assert harness.count_jobs() == len(ids)


def test_a_limited_queue_and_a_free_one_are_claimed_together(harness: Harness) -> None:
    for _ in range(3):
        harness.enqueue(queue="slow")
        harness.enqueue(queue="fast")
    _queues(harness).set_limit("slow", 1, OPERATOR)
    claimed = harness.claim(10, queues=("slow", "fast"))
    assert sorted(c.job.queue for c in claimed) == ["fast", "fast", "fast", "slow"]


@pytest.mark.postgres
def test_a_limit_holds_across_replicas_claiming_at_once(postgres_url: str) -> None:
    """Two stores (two coordinator replicas) claim from one limited queue in parallel:
    the queue's row lock serialises their claims, so the limit is never exceeded."""
    from coordinator.domain.clock import FakeClock
    from tests.conftest import _truncate

    _truncate(postgres_url)
    stores = [Store.open(postgres_url), Store.open(postgres_url)]
    clock = FakeClock()
    try:
        harnesses = [Harness.build(store, clock, CoordinatorConfig()) for store in stores]
        for _ in range(20):
            harnesses[0].enqueue(queue="q")
        _queues(harnesses[0]).set_limit("q", 3, OPERATOR)
        barrier = threading.Barrier(4)

        def claim(n: int) -> int:
            barrier.wait()
            request = ClaimRequest(f"w{n}", ("q",), (WIRE,), 3, LEASE_MS)
            return len(harnesses[n % 2].ops.process(WorkBatch(claims=[request])).claims[0])

        with ThreadPoolExecutor(4) as pool:
            claimed = sum(pool.map(claim, range(4)))

        assert claimed == 3
        assert stores[0].count_by_state()["reserved"] == 3
    finally:
        for store in stores:
            store.close()


def test_listing_counts_each_queue_per_state_before_and_after_folding(harness: Harness) -> None:
    for _ in range(4):
        harness.enqueue(queue="a")
    harness.enqueue(queue="a", run_at_ms=harness.clock.now_ms() + 60_000)
    harness.clock.advance(1_500)
    claimed = harness.run(harness.enqueue(queue="b"))
    harness.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE)
    queues = _queues(harness)

    folded = []
    for _ in range(2):  # the deltas as written, then folded into the counts: the same answer
        listed = {s.queue.name: s for s in queues.page(page_size=0, page_token="")[0]}
        assert sorted(listed) == ["a", "b"]
        a, b = listed["a"].counts, listed["b"].counts
        assert (a[JobState.AVAILABLE], a[JobState.SCHEDULED], a[JobState.RUNNING]) == (4, 1, 0)
        assert (b[JobState.FAILED], b[JobState.RUNNING], b[JobState.AVAILABLE]) == (1, 0, 0)
        assert harness.clock.now_ms() - (listed["a"].oldest_due_run_at_ms or 0) == 1_500
        assert listed["b"].oldest_due_run_at_ms is None
        folded.append(queues.fold_counts())

    assert folded[0] > 0 and folded[1] == 0  # the first pass folded the deltas, none came since


def test_the_counts_match_the_jobs_after_every_kind_of_write(harness: Harness) -> None:
    """The maintained counts equal a plain count of the jobs after enqueues, claims,
    starts, results, releases, lapses, cancels and retries."""
    from coordinator.service.manage import ManagementService

    manage = ManagementService(harness.store, harness.clock)
    ids = [harness.enqueue(queue=f"q{n}") for n in range(6)]
    done = harness.run(ids[0])
    harness.report(done.attempt_id, Outcome.SUCCEEDED)
    retried = harness.run(ids[1])
    harness.report(retried.attempt_id, Outcome.RETRYABLE_FAILURE)
    released = harness.claim_one(ids[2])
    harness.release(released.attempt_id)
    harness.claim_one(ids[3])
    harness.lapse(LEASE_MS)
    manage.cancel(ids[4], OPERATOR)
    manage.retry(ids[4], OPERATOR)
    purged_done = harness.run(ids[5])
    harness.report(purged_done.attempt_id, Outcome.SUCCEEDED)
    harness.clock.advance(1)
    removed = harness.store.transact(lambda tx: tx.purge(JobState.SUCCEEDED, harness.clock.now_ms(), 10))
    assert removed == 2
    queues = _queues(harness)
    queues.fold_counts()

    listed = {
        (stats.queue.name, state.value): count
        for stats in queues.page(page_size=0, page_token="")[0]
        for state, count in stats.counts.items()
        if count
    }
    actual: dict[tuple[str, str], int] = {}
    for job in harness.all_jobs():
        actual[(job.queue, job.state.value)] = actual.get((job.queue, job.state.value), 0) + 1
    assert listed == actual


@pytest.mark.parametrize(
    ("change", "error", "reason"),
    [
        (lambda q: q.pause("nowhere", OPERATOR), NotFound, "QUEUE_NOT_FOUND"),
        (lambda q: q.set_limit("q", 0, OPERATOR), InvalidArgument, "OUT_OF_RANGE"),
        (lambda q: q.set_limit("q", -3, OPERATOR), InvalidArgument, "OUT_OF_RANGE"),
        (lambda q: q.resume("bad name", OPERATOR), InvalidArgument, "NAME_INVALID"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(harness: Harness, change, error, reason) -> None:  # type: ignore[no-untyped-def]
    harness.enqueue(queue="q")
    queues = _queues(harness)
    before = [(s.queue.paused, s.queue.concurrency_limit) for s in queues.page(page_size=0, page_token="")[0]]
    with pytest.raises(error) as refused:
        change(queues)
    assert refused.value.reason == reason
    assert [
        (s.queue.paused, s.queue.concurrency_limit) for s in queues.page(page_size=0, page_token="")[0]
    ] == before
    assert harness.store.list_audit_events(action=None, target=None, before_id=None, limit=10) == []


def test_every_change_is_audited(harness: Harness) -> None:
    harness.enqueue(queue="q")
    queues = _queues(harness)
    queues.pause("q", OPERATOR)
    queues.set_limit("q", 4, OPERATOR)
    queues.resume("q", OPERATOR)
    events = harness.store.list_audit_events(action=None, target="q", before_id=None, limit=10)
    assert [(e.action, e.detail, e.actor_name) for e in reversed(events)] == [
        ("queue.pause", "paused", "ops"),
        ("queue.limit", "limit 4", "ops"),
        ("queue.resume", "resumed", "ops"),
    ]
