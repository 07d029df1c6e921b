"""Concurrency keys and per-key running limits (docs/flow-control.md) on both engines:
a job keeps the key it was enqueued with, a bad key is refused and writes nothing, a
queue's per-key limit caps each key's reserved and running jobs while other keys still
run, it holds together with the queue's own limit, and across replicas claiming at once."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.errors import InvalidArgument, NotFound
from coordinator.service.queues import QueueService
from coordinator.service.work import ClaimRequest, WorkBatch
from coordinator.store import Store

from .harness import LEASE_MS, OPERATOR, WIRE, Harness


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig())


def _enqueue_keys(harness: Harness, keys: dict[str, int], queue: str = "q") -> None:
    specs = [
        NewJobSpec(WIRE, b"{}", queue=queue, concurrency_key=k) for k, n in keys.items() for _ in range(n)
    ]
    harness.enqueue_specs(specs)


def _active_by_key(harness: Harness, queue: str = "q") -> Counter[str]:
    return Counter(
        job.concurrency_key
        for job in harness.all_jobs()
        if job.queue == queue and job.state.value in ("reserved", "running")
    )


def test_a_job_keeps_its_concurrency_key_and_jobs_without_one_share_the_implicit_key(
    harness: Harness,
) -> None:
    keyed = harness.enqueue(concurrency_key="tenant:42")
    plain = harness.enqueue()

    assert harness.job(keyed).concurrency_key == "tenant:42"
    assert harness.job(plain).concurrency_key == ""


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("a b", "NAME_INVALID"),
        ("tenant/1", "NAME_INVALID"),
        ("..", "NAME_INVALID"),
        ("k" * 129, "NAME_TOO_LONG"),
        ("\x00", "NAME_INVALID"),
    ],
)
def test_a_bad_concurrency_key_is_refused_and_nothing_is_written(
    harness: Harness, key: str, reason: str
) -> None:
    good = NewJobSpec(WIRE, b"{}", concurrency_key="fine:1")
    bad = NewJobSpec(WIRE, b"{}", concurrency_key=key)

    with pytest.raises(InvalidArgument) as refused:
        harness.enqueue_specs([good, bad])

    assert refused.value.reason == reason
    assert "concurrency_key" in str(refused.value) and "jobs[1]" in str(refused.value)
    assert harness.count_jobs() == 0


def test_a_key_of_128_units_with_colons_is_accepted(harness: Harness) -> None:
    key = "t:" + "é" * 126
    assert harness.job(harness.enqueue(concurrency_key=key)).concurrency_key == key


def test_a_per_key_limit_caps_each_key_while_other_keys_run(harness: Harness) -> None:
    _enqueue_keys(harness, {"a": 6, "b": 6, "": 6})
    _queues(harness).set_key_limit("q", 2, OPERATOR)

    requests = [ClaimRequest(f"w{n}", ("q",), (WIRE,), 5, LEASE_MS) for n in range(3)]
    claimed = [c for batch in harness.ops.process(WorkBatch(claims=requests)).claims for c in batch]

    assert len(claimed) == 6  # two of each of the three keys, more than the limit in all
    assert _active_by_key(harness) == {"a": 2, "b": 2, "": 2}
    listed = _queues(harness).page(page_size=0, page_token="")[0][0]
    assert (listed.active_keys, listed.keys_at_limit) == (3, 3)
    assert listed.first_keys_at_limit == ("", "a", "b")  # in order of the keys
    assert (listed.keys_at_rate, listed.first_keys_at_rate) == (None, ())
    assert harness.claim(5, queues=("q",), worker_id="w9") == []
    done = next(c for c in claimed if c.job.concurrency_key == "b")
    assert harness.start(done.attempt_id).granted
    assert harness.report(done.attempt_id, Outcome.SUCCEEDED).accepted
    listed = _queues(harness).page(page_size=0, page_token="")[0][0]
    assert (listed.active_keys, listed.keys_at_limit) == (3, 2)  # b has one running
    assert listed.first_keys_at_limit == ("", "a")
    again = harness.claim(5, queues=("q",), worker_id="w9")
    assert [c.job.concurrency_key for c in again] == ["b"]  # the slot that came free
    _queues(harness).set_key_limit("q", None, OPERATOR)
    assert len(harness.claim(20, queues=("q",), worker_id="w9")) == 18 - 7


def test_a_per_key_limit_and_the_queues_own_limit_both_hold(harness: Harness) -> None:
    _enqueue_keys(harness, {"a": 5, "b": 5, "c": 5})
    queues = _queues(harness)
    queues.set_key_limit("q", 2, OPERATOR)
    queues.set_limit("q", 5, OPERATOR)

    claimed = harness.claim(20, queues=("q",))

    assert len(claimed) == 5
    assert all(count <= 2 for count in _active_by_key(harness).values())


def test_a_key_limited_queue_deep_in_one_key_still_hands_out_the_others(harness: Harness) -> None:
    """Key a's jobs come first in claim order; at its limit the claim reads past them."""
    _enqueue_keys(harness, {"a": 30})
    _enqueue_keys(harness, {"b": 2, "c": 2})
    _queues(harness).set_key_limit("q", 1, OPERATOR)

    claimed = harness.claim(10, queues=("q",))

    assert sorted(c.job.concurrency_key for c in claimed) == ["a", "b", "c"]


def test_a_per_key_limit_holds_with_a_free_queue_in_the_same_claim(harness: Harness) -> None:
    _enqueue_keys(harness, {"a": 3}, queue="q")
    _enqueue_keys(harness, {"a": 3}, queue="free")
    _queues(harness).set_key_limit("q", 1, OPERATOR)

    claimed = harness.claim(10, queues=("q", "free"))

    assert sorted(c.job.queue for c in claimed) == ["free", "free", "free", "q"]


@pytest.mark.parametrize(
    ("change", "error", "reason"),
    [
        (lambda q: q.set_key_limit("nowhere", 2, OPERATOR), NotFound, "QUEUE_NOT_FOUND"),
        (lambda q: q.set_key_limit("q", 0, OPERATOR), InvalidArgument, "OUT_OF_RANGE"),
        (lambda q: q.set_key_limit("q", -1, OPERATOR), InvalidArgument, "OUT_OF_RANGE"),
        (lambda q: q.set_key_limit("bad name", 1, OPERATOR), InvalidArgument, "NAME_INVALID"),
    ],
)
def test_bad_key_limits_are_refused_and_change_nothing(harness: Harness, change, error, reason) -> None:  # type: ignore[no-untyped-def]
    harness.enqueue(queue="q")
    queues = _queues(harness)
    queues.set_key_limit("q", 3, OPERATOR)
    before = [s.queue for s in queues.page(page_size=0, page_token="")[0]]
    audited = harness.store.list_audit_events(action=None, target=None, before_id=None, limit=10)

    with pytest.raises(error) as refused:
        change(queues)

    assert refused.value.reason == reason
    assert [s.queue for s in queues.page(page_size=0, page_token="")[0]] == before
    assert harness.store.list_audit_events(action=None, target=None, before_id=None, limit=10) == audited


def test_a_key_limit_change_is_audited_and_listed(harness: Harness) -> None:
    harness.enqueue(queue="q")
    queues = _queues(harness)
    record, effects = queues.set_key_limit("q", 4, OPERATOR)
    assert record.key_limit == 4 and effects.available_changed
    assert [s.queue.key_limit for s in queues.page(page_size=0, page_token="")[0]] == [4]
    queues.set_key_limit("q", None, OPERATOR)
    events = harness.store.list_audit_events(action="queue.key_limit", target="q", before_id=None, limit=10)
    assert [(e.detail, e.actor_name) for e in reversed(events)] == [
        ("key limit 4", "ops"),
        ("no key limit", "ops"),
    ]


@pytest.mark.postgres
def test_a_per_key_limit_holds_across_replicas_claiming_at_once(postgres_url: str) -> None:
    """Two stores (two replicas), four claims at once: the queue row's lock serialises
    them, so no key ever has more than its limit reserved, while every key gets its share."""
    from tests.conftest import _truncate

    _truncate(postgres_url)
    stores = [Store.open(postgres_url), Store.open(postgres_url)]
    clock = FakeClock()
    try:
        harnesses = [Harness.build(store, clock, CoordinatorConfig()) for store in stores]
        _enqueue_keys(harnesses[0], {"a": 10, "b": 10, "c": 10})
        _queues(harnesses[0]).set_key_limit("q", 2, OPERATOR)
        barrier = threading.Barrier(4)

        def claim(n: int) -> int:
            barrier.wait()
            request = ClaimRequest(f"w{n}", ("q",), (WIRE,), 4, LEASE_MS)
            return len(harnesses[n % 2].ops.process(WorkBatch(claims=[request])).claims[0])

        with ThreadPoolExecutor(4) as pool:
            claimed = sum(pool.map(claim, range(4)))

        assert claimed == 6
        assert _active_by_key(harnesses[0]) == {"a": 2, "b": 2, "c": 2}
    finally:
        for store in stores:
            store.close()


def _claim_keys(harness: Harness, rounds: int, count: int) -> list[list[str]]:
    """``rounds`` claims of ``count`` jobs each, every job ended at once (so only turns,
    not limits, decide); the keys each claim got."""
    got = []
    for _ in range(rounds):
        claimed = harness.claim(count, queues=("q",))
        for claim in claimed:
            assert harness.start(claim.attempt_id).granted
            assert harness.report(claim.attempt_id, Outcome.SUCCEEDED).accepted
        got.append([c.job.concurrency_key for c in claimed])
    return got


@pytest.mark.parametrize("count", [1, 4])
def test_fair_turns_start_a_late_keys_jobs_within_a_few_claims(harness: Harness, count: int) -> None:
    """Key a's 200 jobs are enqueued first, then b's 3: b's jobs start within the next
    few claims, not after a's backlog; a still gets its turns meanwhile."""
    _enqueue_keys(harness, {"a": 200})
    _enqueue_keys(harness, {"b": 3})

    got = _claim_keys(harness, 6 // count + 2, count)

    flat = [key for claim in got for key in claim]
    assert flat.count("b") == 3
    last_b = max(i for i, key in enumerate(flat) if key == "b")
    assert last_b < 6  # alternating: b's third job is among the first six claimed
    assert flat[: last_b + 1].count("a") >= 2


def test_turns_take_the_implicit_key_as_one_key(harness: Harness) -> None:
    _enqueue_keys(harness, {"": 50})
    _enqueue_keys(harness, {"t:1": 2})

    got = _claim_keys(harness, 4, 1)

    assert sorted(key for claim in got for key in claim) == ["", "", "t:1", "t:1"]


def test_priority_comes_before_turns(harness: Harness) -> None:
    harness.enqueue_specs(
        [NewJobSpec(WIRE, b"{}", queue="q", concurrency_key="a", priority=5) for _ in range(3)]
    )
    _enqueue_keys(harness, {"b": 3})  # priority 0: after every priority-5 job

    got = _claim_keys(harness, 3, 2)

    assert [key for claim in got for key in claim] == ["a", "a", "a", "b", "b", "b"]


def test_a_queue_without_keys_claims_in_plain_order(harness: Harness) -> None:
    ids = [e.job_id for e in harness.enqueue_specs([NewJobSpec(WIRE, b"{}", queue="q") for _ in range(5)])]
    assert [c.job.id for c in harness.claim(5, queues=("q",))] == sorted(ids)
    assert not _queues(harness).page(page_size=0, page_token="")[0][0].queue.keyed


def test_a_held_back_job_says_which_control_holds_it(harness: Harness) -> None:
    from coordinator.domain.flow import WaitingReason

    _enqueue_keys(harness, {"a": 3, "b": 1})
    queues = _queues(harness)
    reason = lambda job_id: harness.jobs.waiting_reason(harness.job(job_id))  # noqa: E731
    jobs_of = {key: [j.id for j in harness.all_jobs() if j.concurrency_key == key] for key in ("a", "b")}
    assert reason(jobs_of["a"][0]) is None  # claimable, nothing holds it back

    queues.set_key_limit("q", 1, OPERATOR)
    claimed = harness.claim(5, queues=("q",))
    assert sorted(c.job.concurrency_key for c in claimed) == ["a", "b"]
    waiting_a = next(j for j in jobs_of["a"] if harness.job(j).state.value == "available")
    assert reason(waiting_a) is WaitingReason.KEY_LIMIT
    assert reason(claimed[0].job.id) is None  # reserved: not waiting
    queues.set_limit("q", 2, OPERATOR)
    assert reason(waiting_a) is WaitingReason.QUEUE_LIMIT  # the queue's limit is checked first
    queues.pause("q", OPERATOR)
    assert reason(waiting_a) is WaitingReason.QUEUE_PAUSED
