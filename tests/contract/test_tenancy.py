"""Queues as the tenancy boundary in the store, on both engines: idempotency and unique
keys are per queue, a parent outside the queues a caller may reach is refused as a
missing one (nothing written), and a claim hands a parent's output only to a token that
may serve the parent's queue, even after the parent was purged."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import Outcome
from coordinator.errors import NotFound, PermissionDenied
from coordinator.service.work import Claimed, ClaimRequest, WorkBatch

from .harness import LEASE_MS, WIRE, Harness, sent_statements
from .test_query_plans import postgres_plan, sqlite_plan


def _succeed(harness: Harness, job_id: str, output: bytes) -> None:
    claimed = harness.run(job_id)
    assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=output).accepted


def _claim_as(harness: Harness, queue: str, token_queues: frozenset[str] | None) -> Claimed:
    request = ClaimRequest("w", (queue,), (WIRE,), 1, LEASE_MS, "tok", token_queues=token_queues)
    [claimed] = harness.ops.process(WorkBatch(claims=[request])).claims[0]
    return claimed


def test_the_same_idempotency_key_in_two_queues_names_two_jobs(harness: Harness) -> None:
    [a] = harness.enqueue_specs([NewJobSpec(WIRE, b"a", queue="tenant-a", idempotency_key="capture-o-1")])
    [b] = harness.enqueue_specs([NewJobSpec(WIRE, b"b", queue="tenant-b", idempotency_key="capture-o-1")])

    assert not b.existing and b.job_id != a.job_id
    assert (harness.job(b.job_id).queue, harness.job(b.job_id).payload) == ("tenant-b", b"b")
    # Within one queue a repeat still returns that queue's job.
    [again_a, again_b] = harness.enqueue_specs(
        [
            NewJobSpec(WIRE, b"x", queue="tenant-a", idempotency_key="capture-o-1"),
            NewJobSpec(WIRE, b"y", queue="tenant-b", idempotency_key="capture-o-1"),
        ]
    )
    assert (again_a.job_id, again_a.existing) == (a.job_id, True)
    assert (again_b.job_id, again_b.existing) == (b.job_id, True)
    assert harness.count_jobs() == 2


def test_one_batch_may_use_one_key_in_two_queues(harness: Harness) -> None:
    first, second = harness.enqueue_specs(
        [
            NewJobSpec(WIRE, b"", queue="tenant-a", idempotency_key="k"),
            NewJobSpec(WIRE, b"", queue="tenant-b", idempotency_key="k"),
        ]
    )
    assert not first.existing and not second.existing and first.job_id != second.job_id


def test_the_same_unique_key_in_two_queues_names_two_jobs(harness: Harness) -> None:
    [a] = harness.enqueue_specs([NewJobSpec(WIRE, b"", queue="tenant-a", unique_key="report")])
    [b, again_a] = harness.enqueue_specs(
        [
            NewJobSpec(WIRE, b"", queue="tenant-b", unique_key="report"),
            NewJobSpec(WIRE, b"", queue="tenant-a", unique_key="report"),
        ]
    )
    assert not b.existing and b.job_id != a.job_id
    assert (again_a.job_id, again_a.existing) == (a.job_id, True)
    assert harness.count_jobs() == 2


def test_a_parent_outside_the_reachable_queues_is_refused_as_missing(harness: Harness) -> None:
    victim = harness.enqueue(queue="tenant-a")
    missing = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
    refusals = []
    for parent in (victim, missing):
        with pytest.raises(NotFound) as refused:
            harness.jobs.enqueue(
                [NewJobSpec(WIRE, b"", queue="tenant-b", parent_ids=(parent,))],
                reachable=frozenset({"tenant-b"}),
            )
        refusals.append((str(refused.value).replace(parent, "<id>"), refused.value.reason))

    assert refusals[0] == refusals[1]  # the same answer: existence does not leak
    assert refusals[0][1] == "PARENT_NOT_FOUND"
    assert harness.count_jobs() == 1  # nothing written
    # A parent in a reachable queue is accepted.
    own = harness.enqueue(queue="tenant-b")
    [child] = harness.jobs.enqueue(
        [NewJobSpec(WIRE, b"", queue="tenant-b", parent_ids=(own,))], reachable=frozenset({"tenant-b"})
    )
    assert not child.existing


def test_a_restricted_caller_enqueues_into_its_queues_only(harness: Harness) -> None:
    victim = harness.enqueue(queue="tenant-a", idempotency_key="capture-o-1")
    specs = [
        NewJobSpec(WIRE, b"", queue="tenant-b"),
        NewJobSpec(WIRE, b"", queue="tenant-a", idempotency_key="capture-o-1"),
    ]

    with pytest.raises(PermissionDenied) as refused:
        harness.jobs.enqueue(specs, reachable=frozenset({"tenant-b"}))

    assert refused.value.reason == "QUEUE_NOT_ALLOWED"
    assert refused.value.metadata == {"index": "1", "queue": "tenant-a"}
    assert victim not in str(refused.value)  # the key found nothing
    assert harness.count_jobs() == 1  # nothing of the call was written


def test_a_claim_withholds_outputs_of_parents_the_token_may_not_serve(harness: Harness) -> None:
    foreign = harness.enqueue(queue="tenant-a")
    own = harness.enqueue(queue="tenant-b")
    _succeed(harness, foreign, b'{"card_token":"tok_4111_SECRET"}')
    _succeed(harness, own, b"mine")
    # An unrestricted enqueue names both; the child is in tenant B's queue.
    child = harness.enqueue(queue="tenant-b", parent_ids=(foreign, own))
    # Retention purging the parent must not open the gate: the row keeps the queue.
    engine = create_engine(harness.store.url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": foreign})
    engine.dispose()

    restricted = _claim_as(harness, "tenant-b", frozenset({"tenant-b"}))

    assert restricted.job.id == child
    assert dict(restricted.parent_outputs) == {own: b"mine"}


def test_a_token_that_may_serve_the_parents_queue_gets_its_output(harness: Harness) -> None:
    parent = harness.enqueue(queue="extract")
    _succeed(harness, parent, b"rows")
    harness.enqueue(queue="load", parent_ids=(parent,))

    both = _claim_as(harness, "load", frozenset({"extract", "load"}))

    assert dict(both.parent_outputs) == {parent: b"rows"}


@pytest.mark.perf
@pytest.mark.parametrize(
    ("key_field", "index"),
    [("idempotency_key", "ux_jobs_idempotency_key"), ("unique_key", "ux_jobs_unique_key")],
)
def test_a_key_is_looked_up_through_its_per_queue_index(harness: Harness, key_field: str, index: str) -> None:
    """Per-queue keys stay one indexed read per enqueue batch, not a scan of ``jobs``."""
    for n in range(40):
        harness.enqueue_specs([NewJobSpec(WIRE, b"", queue=f"q{n % 4}", **{key_field: f"k-{n}"})])  # type: ignore[arg-type]
    with sent_statements() as sent:
        harness.enqueue_specs([NewJobSpec(WIRE, b"", queue="q1", **{key_field: "k-1"})])  # type: ignore[arg-type]
    [(sql, params)] = [(sql, p) for sql, p in sent if f"jobs.{key_field} IN" in sql]
    if harness.store.postgres:
        nodes = postgres_plan(harness.store.url, sql, params)
        assert not [n for n in nodes if n.startswith("Seq Scan on jobs")], nodes
        assert [n for n in nodes if index in n], nodes
    else:
        lines = sqlite_plan(harness.store.url, sql, params)
        assert [line for line in lines if f"USING INDEX {index}" in line], lines
