"""What a keyed claim reads, on both engines (docs/flow-control.md): turns over more keys
than a claim wants give each key one job, in key order from the key after the one
served last and then around from the first (on SQLite the keys and their jobs come from
one statement in that case, and wrapping around costs one probe more), and a per-key
limited queue's bounded read hands out its keys' jobs in claim order, past keys with no
room in front of them."""

from __future__ import annotations

from coordinator.config import CoordinatorConfig
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.service.queues import QueueService

from .harness import OPERATOR, WIRE, Harness


def _queues(harness: Harness) -> QueueService:
    return QueueService(harness.store, harness.clock, CoordinatorConfig())


def _keys_of(harness: Harness, count: int, *, finish: bool) -> list[str]:
    claimed = harness.claim(count, queues=("q",))
    if finish:
        for claim in claimed:
            assert harness.start(claim.attempt_id).granted
            assert harness.report(claim.attempt_id, Outcome.SUCCEEDED).accepted
    return [c.job.concurrency_key for c in claimed]


def _enqueue(harness: Harness, keys: list[str], per_key: int, priority: int = 0) -> list[str]:
    specs = [
        NewJobSpec(WIRE, b"{}", queue="q", concurrency_key=key, priority=priority)
        for _ in range(per_key)
        for key in keys
    ]
    return [e.job_id for e in harness.enqueue_specs(specs)]


def test_turns_over_many_keys_give_each_key_one_job_from_the_key_after_the_last_served(
    harness: Harness,
) -> None:
    keys = [f"k{n:02}" for n in range(10)]
    _enqueue(harness, list(reversed(keys)), per_key=3)  # claim order is not key order

    got = [_keys_of(harness, 4, finish=True) for _ in range(4)]

    assert got == [
        ["k00", "k01", "k02", "k03"],  # no key served yet: from the first
        ["k04", "k05", "k06", "k07"],
        ["k08", "k09", "k00", "k01"],  # two keys left after k07: around from the first
        ["k02", "k03", "k04", "k05"],
    ]


def test_turns_pass_over_keys_at_their_limit_and_take_the_key_that_came_free(harness: Harness) -> None:
    keys = [f"k{n:02}" for n in range(6)]
    _enqueue(harness, keys, per_key=3)
    _queues(harness).set_key_limit("q", 1, OPERATOR)

    first = harness.claim(2, queues=("q",))
    assert [c.job.concurrency_key for c in first] == ["k00", "k01"]
    assert _keys_of(harness, 2, finish=False) == ["k02", "k03"]
    assert _keys_of(harness, 4, finish=False) == ["k04", "k05"]  # every other key is at 1
    assert _keys_of(harness, 4, finish=False) == []
    assert harness.start(first[1].attempt_id).granted
    assert harness.report(first[1].attempt_id, Outcome.SUCCEEDED).accepted
    assert _keys_of(harness, 4, finish=False) == ["k01"]


def test_a_limited_read_past_a_full_key_hands_out_the_jobs_in_claim_order(harness: Harness) -> None:
    """Key a (best priority) is at its limit; b's jobs, enqueued out of claim order, come
    out in claim order: priority first, then run-at and ID."""
    _enqueue(harness, ["a"], per_key=10, priority=9)
    _queues(harness).set_key_limit("q", 3, OPERATOR)
    assert _keys_of(harness, 3, finish=False) == ["a", "a", "a"]
    low = _enqueue(harness, ["b"], per_key=2, priority=1)
    high = _enqueue(harness, ["b"], per_key=2, priority=5)

    claimed = harness.claim(3, queues=("q",))

    assert [c.job.id for c in claimed] == [*sorted(high), min(low)]  # one clock tick: by ID
    assert harness.claim(3, queues=("q",)) == []  # a and b both at 3
