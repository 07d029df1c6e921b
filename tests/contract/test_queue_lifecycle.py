"""Queue lifecycle on both engines: listings are keyset paged by name, a deployment holds
at most ``max_queues`` queues (the enqueue that would create one more is refused and
changes nothing), an empty queue can be deleted (one with jobs cannot), and retention
forgets the queues left without jobs or controls."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from coordinator.service.queues import QueueService
from coordinator.service.retention import RetentionService
from coordinator.store import Store

from .harness import OPERATOR, WIRE, Harness


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, harness.config)


def _names(harness: Harness) -> list[str]:
    """Every listed queue's name, following the pages."""
    queues, names, token = _queues(harness), [], ""
    while True:
        page, token = queues.page(page_size=2, page_token=token)
        names += [stats.queue.name for stats in page]
        if not token:
            return names


def _purge_everything(harness: Harness) -> None:
    service = RetentionService(harness.store, harness.clock)
    harness.clock.advance(1_000)
    for state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        service.purge_batch(state, harness.clock.now_ms())


# -- paging ------------------------------------------------------------------------------


def test_queues_are_listed_a_bounded_page_at_a_time_by_name(harness: Harness) -> None:
    for name in ("e", "a", "d", "b", "c"):
        harness.enqueue(queue=name)
    harness.enqueue(queue="a")
    queues = _queues(harness)

    first, token = queues.page(page_size=2, page_token="")
    second, token2 = queues.page(page_size=2, page_token=token)
    last, end = queues.page(page_size=2, page_token=token2)

    assert [[s.queue.name for s in page] for page in (first, second, last)] == [["a", "b"], ["c", "d"], ["e"]]
    assert token and token2 and end == ""
    assert first[0].counts[JobState.AVAILABLE] == 2  # counts come with each page


def test_queues_are_listed_in_natural_order_across_pages(harness: Harness) -> None:
    """The newcomer's complaint: cq1, cq10, cq100 no more."""
    names = ["cq100", "cq10", "cq2", "cq1", "cq20", "cq3", "cq010"]
    for name in names:
        harness.enqueue(queue=name)
    assert _names(harness) == ["cq1", "cq2", "cq3", "cq010", "cq10", "cq20", "cq100"]


def test_a_page_is_clamped_to_the_max_page_size(harness: Harness) -> None:
    small = harness.with_bounds(max_page_size=3)
    for n in range(5):
        small.enqueue(queue=f"q{n}")
    page, token = _queues(small).page(page_size=1_000, page_token="")
    assert len(page) == 3 and token


@pytest.mark.parametrize(
    ("page_size", "page_token", "field"),
    [
        (-1, "", "page_size"),
        (0, "not-a-token", "page_token"),
        (0, "AXNh", "page_token"),  # a ListSchedules token ("s" + "a") is not one of queues
        (0, "x" * 5_000, "page_token"),
    ],
)
def test_a_bad_page_request_is_invalid_argument_naming_the_field(
    harness: Harness, page_size: int, page_token: str, field: str
) -> None:
    harness.enqueue(queue="a")
    with pytest.raises(InvalidArgument) as refused:
        _queues(harness).page(page_size=page_size, page_token=page_token)
    assert refused.value.field == field


# -- the bound on how many queues there are ------------------------------------------


def test_an_enqueue_that_would_create_a_queue_past_max_queues_is_refused_and_changes_nothing(
    harness: Harness,
) -> None:
    small = harness.with_bounds(max_queues=2)
    small.enqueue(queue="a")
    small.enqueue(queue="b")
    before = small.rows()

    with pytest.raises(ResourceExhausted) as refused:
        small.enqueue_specs([NewJobSpec(WIRE, b"{}", queue="a"), NewJobSpec(WIRE, b"{}", queue="c")])

    assert refused.value.reason == "QUEUE_LIMIT_REACHED"
    assert "max_queues" in str(refused.value) and "2" in str(refused.value)
    assert refused.value.metadata == {"queue": "c", "queues": "2", "max_queues": "2"}
    assert small.rows() == before  # the whole batch was refused, job of queue a too
    assert _names(small) == ["a", "b"]
    small.enqueue(queue="a")  # existing queues take jobs as before
    assert small.count_jobs() == 3


def test_a_deleted_queue_makes_room_for_a_new_one(harness: Harness) -> None:
    small = harness.with_bounds(max_queues=1)
    claimed = small.run(small.enqueue(queue="old"), queues=("old",))
    small.report(claimed.attempt_id, Outcome.SUCCEEDED)
    with pytest.raises(ResourceExhausted):
        small.enqueue(queue="new")
    _purge_everything(small)
    _queues(small).delete("old", OPERATOR)
    small.enqueue(queue="new")
    assert _names(small) == ["new"]


@pytest.mark.postgres
def test_replicas_creating_queues_at_once_never_pass_the_bound(postgres_url: str) -> None:
    """Four replicas each create new queues in parallel: the advisory lock serialises
    the creations, so exactly ``max_queues`` exist and every other creation was refused."""
    from tests.conftest import _truncate

    _truncate(postgres_url)
    config = CoordinatorConfig()
    bounds = StoreBounds(max_queues=10)
    stores = [Store.open(postgres_url, bounds=bounds) for _ in range(4)]
    clock = FakeClock()
    try:
        harnesses = [Harness.build(store, clock, config) for store in stores]
        barrier = threading.Barrier(4)

        def create(n: int) -> int:
            barrier.wait()
            refused = 0
            for k in range(6):
                try:
                    harnesses[n].enqueue(queue=f"r{n}-{k}")
                except ResourceExhausted:
                    refused += 1
            return refused

        with ThreadPoolExecutor(4) as pool:
            refused = sum(pool.map(create, range(4)))

        assert refused == 24 - 10
        assert len(_names(harnesses[0])) == 10
        assert harnesses[0].count_jobs() == 10
    finally:
        for store in stores:
            store.close()


# -- deleting a queue ----------------------------------------------------------------


def test_a_queue_with_unfinished_jobs_is_not_deleted_and_nothing_changes(harness: Harness) -> None:
    harness.enqueue(queue="busy")
    _queues(harness).pause("busy", OPERATOR)
    before = harness.rows()
    with pytest.raises(FailedPrecondition) as refused:
        _queues(harness).delete("busy", OPERATOR)
    assert refused.value.reason == "QUEUE_NOT_EMPTY"
    assert refused.value.metadata["unfinished"] == "1"
    assert "1 available" in str(refused.value)
    assert harness.rows() == before
    (stats,) = _queues(harness).page(page_size=0, page_token="")[0]
    assert stats.queue.paused and stats.counts[JobState.AVAILABLE] == 1
    assert [
        e.action for e in harness.store.list_audit_events(action=None, target="busy", before_id=None, limit=9)
    ] == ["queue.pause"]


def test_a_queue_whose_jobs_finished_but_were_not_purged_is_not_deleted(harness: Harness) -> None:
    claimed = harness.run(harness.enqueue(queue="done"), queues=("done",))
    harness.report(claimed.attempt_id, Outcome.SUCCEEDED)
    with pytest.raises(FailedPrecondition) as refused:
        _queues(harness).delete("done", OPERATOR)
    assert refused.value.metadata == {"queue": "done", "unfinished": "0", "jobs": "1"}
    assert "purge" in str(refused.value)
    assert _names(harness) == ["done"]


def test_an_empty_queue_is_deleted_with_its_controls_audited_and_made_again_by_an_enqueue(
    harness: Harness,
) -> None:
    queues = _queues(harness)
    claimed = harness.run(harness.enqueue(queue="gone"), queues=("gone",))
    harness.report(claimed.attempt_id, Outcome.SUCCEEDED)
    harness.enqueue(queue="kept")
    queues.set_limit("gone", 2, OPERATOR)
    _purge_everything(harness)

    deleted = queues.delete("gone", OPERATOR)

    assert deleted.name == "gone" and deleted.concurrency_limit == 2
    assert _names(harness) == ["kept"]
    events = harness.store.list_audit_events(action="queue.delete", target=None, before_id=None, limit=9)
    assert [(e.target, e.actor_name) for e in events] == [("gone", "ops")]
    with pytest.raises(NotFound):
        queues.pause("gone", OPERATOR)
    # This store forgot it had seen the queue: the next enqueue makes the row again.
    harness.enqueue(queue="gone")
    (stats,) = [s for s in queues.page(page_size=0, page_token="")[0] if s.queue.name == "gone"]
    assert stats.queue.concurrency_limit is None
    assert stats.counts[JobState.AVAILABLE] == 1 and stats.counts[JobState.SUCCEEDED] == 0


def test_deleting_an_unknown_or_badly_named_queue_is_refused(harness: Harness) -> None:
    with pytest.raises(NotFound) as unknown:
        _queues(harness).delete("nowhere", OPERATOR)
    assert unknown.value.reason == "QUEUE_NOT_FOUND"
    with pytest.raises(InvalidArgument):
        _queues(harness).delete("bad name", OPERATOR)
    assert harness.store.list_audit_events(action=None, target=None, before_id=None, limit=9) == []


def test_a_job_enqueued_by_a_replica_that_missed_the_delete_gets_its_queue_back_at_the_fold(
    harness: Harness,
) -> None:
    """Another replica still believes the queue exists (its store saw it), so its enqueue
    writes no queue row; the next count fold makes the row again from the job's count."""
    replica = Harness.build(Store.open(harness.store.url), harness.clock, harness.config)
    try:
        claimed = replica.run(replica.enqueue(queue="q"), queues=("q",))
        replica.report(claimed.attempt_id, Outcome.SUCCEEDED)
        _purge_everything(harness)
        _queues(harness).delete("q", OPERATOR)

        job = replica.enqueue(queue="q")
        _queues(harness).fold_counts()

        (stats,) = _queues(harness).page(page_size=0, page_token="")[0]
        assert stats.queue.name == "q" and stats.counts[JobState.AVAILABLE] == 1
        assert [c.job.id for c in harness.claim(1, queues=("q",))] == [job]
    finally:
        replica.store.close()


# -- retention -----------------------------------------------------------------------


def test_retention_forgets_queues_without_jobs_or_controls_and_keeps_the_rest(harness: Harness) -> None:
    for name in ("cq1", "cq2", "paused", "limited", "busy"):
        claimed = harness.run(harness.enqueue(queue=name), queues=(name,))
        harness.report(claimed.attempt_id, Outcome.SUCCEEDED)
    harness.enqueue(queue="busy")
    _queues(harness).pause("paused", OPERATOR)
    _queues(harness).set_limit("limited", 1, OPERATOR)
    _purge_everything(harness)
    retention = RetentionService(harness.with_bounds(max_purge_batch=1).store, harness.clock)

    forgotten = [retention.forget_idle_queues() for _ in range(3)]

    assert forgotten == [["cq1"], ["cq2"], []]  # one batch of max_purge_batch at a time
    assert _names(harness) == ["busy", "limited", "paused"]
    harness.enqueue(queue="cq1")  # a forgotten name is a new queue again
    assert "cq1" in _names(harness)


def test_retention_keys_queues_an_older_coordinator_made_without_a_sort_key(harness: Harness) -> None:
    """During a rolling upgrade a coordinator of before migration 0020 inserts queue rows
    without the key (the column's default, empty): the next retention pass keys them."""
    harness.enqueue(queue="cq2")
    harness.enqueue(queue="cq10")
    engine = create_engine(harness.store.url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO queues (name, paused, concurrency_limit, created_at_ms, updated_at_ms)"
                    " VALUES ('cq3', true, NULL, 1, 1)"
                )
            )
    finally:
        engine.dispose()
    assert _names(harness) == ["cq3", "cq2", "cq10"]  # unkeyed rows list first

    RetentionService(harness.store, harness.clock).forget_idle_queues()

    assert _names(harness) == ["cq2", "cq3", "cq10"]


def test_a_replica_looks_a_queue_up_again_once_its_memory_of_names_expires(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names a store has seen are trusted for ``KNOWN_QUEUES_TTL_S`` only: after that an
    enqueue to a queue deleted elsewhere makes its row again at once (and counts it
    against ``max_queues``), with no count fold needed."""
    import time

    from coordinator.store.tx_queue_lifecycle import KNOWN_QUEUES_TTL_S

    replica = Harness.build(Store.open(harness.store.url), harness.clock, harness.config)
    try:
        claimed = replica.run(replica.enqueue(queue="q"), queues=("q",))
        replica.report(claimed.attempt_id, Outcome.SUCCEEDED)
        _purge_everything(harness)
        _queues(harness).delete("q", OPERATOR)
        later = time.monotonic() + KNOWN_QUEUES_TTL_S + 1
        monkeypatch.setattr("coordinator.store.store.time.monotonic", lambda: later)

        replica.enqueue(queue="q")

        assert _names(harness) == ["q"]
    finally:
        replica.store.close()
