"""Claims: order (R-17), filters, run-at, the batch clamp (docs/limits.md), exactly-once
reservation with an attempt row and a lease (R-10), and FOR UPDATE SKIP LOCKED on
PostgreSQL (docs/scaling.md)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState
from coordinator.scheduler.due import promote_due
from coordinator.service.work import ClaimRequest, WorkBatch
from coordinator.store import Store
from coordinator.store.claims import ClaimWanted

from .harness import LEASE_MS, OTHER_WIRE, QUEUE, SECOND, WIRE, WORKER, Harness


def test_r17_claims_follow_priority_then_run_at_then_id(harness: Harness) -> None:
    now = harness.clock.now_ms()
    specs = [
        NewJobSpec(WIRE, b"low-early", priority=0, run_at_ms=now - 3 * SECOND),
        NewJobSpec(WIRE, b"high-late", priority=5, run_at_ms=now),
        NewJobSpec(WIRE, b"high-early", priority=5, run_at_ms=now - 1 * SECOND),
        NewJobSpec(WIRE, b"negative", priority=-2, run_at_ms=now - 9 * SECOND),
        *[NewJobSpec(WIRE, f"tie-{i}".encode(), priority=1, run_at_ms=now - SECOND) for i in range(4)],
    ]
    ids = [e.job_id for e in harness.enqueue_specs(specs)]
    by_payload = {harness.job(job_id).payload: job_id for job_id in ids}
    ties = sorted(by_payload[f"tie-{i}".encode()] for i in range(4))  # same priority and run-at
    expected = [
        by_payload[b"high-early"],
        by_payload[b"high-late"],
        *ties,
        by_payload[b"low-early"],
        by_payload[b"negative"],
    ]

    one_by_one = [harness.claim_one().job.id for _ in ids]

    assert one_by_one == expected
    assert harness.claim(1) == []


def test_r17_one_claim_of_many_returns_them_in_claim_order(harness: Harness) -> None:
    specs = [NewJobSpec(WIRE, b"", priority=p) for p in (1, 9, 3, 9, 0)]
    ids = [e.job_id for e in harness.enqueue_specs(specs)]

    claimed = [c.job.id for c in harness.claim(10)]

    assert claimed == sorted(ids, key=lambda i: (-harness.job(i).priority, i))


def test_claims_take_only_the_requested_queues_and_wire_names(harness: Harness) -> None:
    wanted = harness.enqueue(WIRE, queue="billing")
    other_wire = harness.enqueue(OTHER_WIRE, queue="billing")
    other_queue = harness.enqueue(WIRE, queue="emails")
    default_queue = harness.enqueue(WIRE)

    claimed = harness.claim(10, queues=("billing",), wire_names=(WIRE,))

    assert [c.job.id for c in claimed] == [wanted]
    for job_id in (other_wire, other_queue, default_queue):
        assert harness.job(job_id).state is JobState.AVAILABLE
    both = harness.claim(10, queues=("billing", "emails"), wire_names=(WIRE, OTHER_WIRE))
    assert {c.job.id for c in both} == {other_wire, other_queue}
    assert harness.job(default_queue).state is JobState.AVAILABLE


def test_claims_without_wire_names_or_count_take_nothing(harness: Harness) -> None:
    job_id = harness.enqueue()

    assert harness.claim(5, wire_names=()) == []
    assert harness.claim(0) == []
    assert harness.claim(-3) == []
    assert harness.job(job_id).state is JobState.AVAILABLE
    assert harness.attempts(job_id) == []


def test_a_scheduled_job_is_claimed_only_once_its_run_at_has_come(harness: Harness) -> None:
    run_at = harness.clock.now_ms() + 30 * SECOND
    job_id = harness.enqueue(run_at_ms=run_at)

    assert harness.claim(5) == []
    harness.clock.advance(30 * SECOND - 1)
    assert harness.claim(5) == []
    assert harness.job(job_id).state is JobState.SCHEDULED

    harness.clock.advance(1)
    claimed = harness.claim_one(job_id)

    assert claimed.job.state is JobState.RESERVED
    assert harness.job(job_id).state is JobState.RESERVED


def test_promote_due_makes_due_scheduled_jobs_available(harness: Harness) -> None:
    now = harness.clock.now_ms()
    due = harness.enqueue(run_at_ms=now + 10 * SECOND)
    later = harness.enqueue(run_at_ms=now + 20 * SECOND)
    harness.clock.advance(10 * SECOND)

    answers = promote_due(harness.ops)

    assert answers.available_changed is True
    assert harness.job(due).state is JobState.AVAILABLE
    assert harness.job(later).state is JobState.SCHEDULED
    assert harness.transitions(due)[-1]["reason"] == "due"
    assert promote_due(harness.ops).available_changed is False


def test_s5_claim_count_is_clamped_to_max_claim_batch(harness: Harness) -> None:
    assert harness.config.max_claim_batch == 128
    harness.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(136)])

    assert len(harness.claim(1_000)) == 128
    assert len(harness.claim(1_000)) == 8

    small = harness.with_bounds(max_claim_batch=3)
    small.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(5)])
    assert len(small.claim(100)) == 3
    assert harness.store.count_by_state() == {"reserved": 139, "available": 2}


def test_a_job_is_never_claimed_twice(harness: Harness) -> None:
    ids = {e.job_id for e in harness.enqueue_specs([NewJobSpec(WIRE, b"") for _ in range(6)])}
    requests = [ClaimRequest(f"w-{n}", (QUEUE,), (WIRE,), 4, LEASE_MS) for n in range(3)]

    answers = harness.ops.process(WorkBatch(claims=requests))

    taken = [c.job.id for claims in answers.claims for c in claims]
    assert len(taken) == len(set(taken)) == 6
    assert set(taken) == ids
    assert [len(claims) for claims in answers.claims] == [4, 2, 0]
    assert harness.claim(10) == []
    for job_id in ids:
        assert len(harness.attempts(job_id)) == 1


def test_a_claim_reserves_the_job_with_a_lease_and_records_an_attempt(harness: Harness) -> None:
    job_id = harness.enqueue(payload=b"payload")
    harness.clock.advance(5 * SECOND)
    now = harness.clock.now_ms()

    claimed = harness.claim_one(job_id, lease_ms=45 * SECOND, worker_id="worker-7")

    assert claimed.lease_expires_at_ms == now + 45 * SECOND
    assert claimed.job.payload == b"payload"
    job = harness.job(job_id)
    assert job.state is JobState.RESERVED
    assert job.current_attempt_id == claimed.attempt_id
    assert job.worker_id == "worker-7"
    assert job.lease_expires_at_ms == now + 45 * SECOND
    assert (job.executions, job.unstarted_streak) == (0, 0)  # a claim charges nothing
    [attempt] = harness.attempts(job_id)
    assert attempt.id == claimed.attempt_id
    assert (attempt.job_id, attempt.generation, attempt.worker_id) == (job_id, 1, "worker-7")
    assert (attempt.claimed_at_ms, attempt.started_at_ms, attempt.finished_at_ms) == (now, None, None)
    assert (attempt.execution_number, attempt.outcome, attempt.reported) == (0, None, False)
    last = harness.transitions(job_id)[-1]
    assert (last["from_state"], last["to_state"], last["reason"]) == ("available", "reserved", "claimed")
    assert last["attempt_id"] == claimed.attempt_id


# -- PostgreSQL: FOR UPDATE SKIP LOCKED (docs/scaling.md) ------------------------------------------


@pytest.mark.postgres
def test_postgres_concurrent_claims_from_separate_stores_never_share_a_job(postgres_url: str) -> None:
    """docs/scaling.md: replicas claiming at once each get distinct jobs, and all jobs get claimed."""
    queue = f"q-{uuid.uuid4().hex[:12]}"  # the per-run database is shared: stay apart
    clock = FakeClock()
    threads = 4
    stores = [Store.open(postgres_url) for _ in range(threads)]
    try:
        harnesses = [Harness.build(s, clock, CoordinatorConfig()) for s in stores]
        specs = [NewJobSpec(WIRE, b"", queue=queue) for _ in range(160)]
        ids = {e.job_id for e in harnesses[0].enqueue_specs(specs)}
        barrier = threading.Barrier(threads)

        def drain(n: int) -> list[tuple[str, str]]:
            request = ClaimRequest(f"worker-{n}", (queue,), (WIRE,), 3, LEASE_MS)
            taken: list[tuple[str, str]] = []
            barrier.wait()
            while claimed := harnesses[n].ops.process(WorkBatch(claims=[request])).claims[0]:
                taken += [(c.job.id, c.attempt_id) for c in claimed]
            return taken

        with ThreadPoolExecutor(threads) as pool:
            results = [f.result(timeout=60) for f in [pool.submit(drain, n) for n in range(threads)]]

        taken = [job_id for result in results for job_id, _ in result]
        assert len(taken) == len(set(taken)) == 160
        assert set(taken) == ids
        assert sum(1 for result in results if result) > 1, "the claims did not overlap at all"
        for n, result in enumerate(results):
            for job_id, attempt_id in result:
                job = harnesses[0].job(job_id)
                assert (job.state, job.current_attempt_id, job.worker_id) == (
                    JobState.RESERVED,
                    attempt_id,
                    f"worker-{n}",
                )
                assert [a.id for a in harnesses[0].attempts(job_id)] == [attempt_id]
    finally:
        for s in stores:
            s.close()


@pytest.mark.postgres
def test_postgres_a_claim_skips_rows_another_transaction_holds(postgres_url: str) -> None:
    """docs/scaling.md: a claim never waits on (or takes) rows locked by another replica's claim."""
    queue = f"q-{uuid.uuid4().hex[:12]}"
    clock = FakeClock()
    holder, claimer = Store.open(postgres_url), Store.open(postgres_url)
    try:
        first = Harness.build(holder, clock, CoordinatorConfig())
        second = Harness.build(claimer, clock, CoordinatorConfig())
        ids = [e.job_id for e in first.enqueue_specs([NewJobSpec(WIRE, b"", queue=queue) for _ in range(5)])]
        request = ClaimRequest(WORKER, (queue,), (WIRE,), 10, LEASE_MS)

        with ThreadPoolExecutor(1) as pool, holder.write() as tx:
            (found,) = tx.claim([ClaimWanted((queue,), (WIRE,), 2)], clock.now_ms())
            held = {job.id for job in found.jobs}
            answers = pool.submit(second.ops.process, WorkBatch(claims=[request])).result(timeout=10)

        claimed = {c.job.id for c in answers.claims[0]}
        assert len(held) == 2
        assert claimed == set(ids) - held
        for job_id in held:
            assert first.job(job_id).state is JobState.AVAILABLE
    finally:
        holder.close()
        claimer.close()


def test_r17_claims_of_one_batch_are_served_in_turn_each_the_best_jobs_left_to_it(harness: Harness) -> None:
    """Several claims in one batch, over overlapping queues and wire names: each, in its
    turn, gets the jobs a claim made alone at that moment would get (claim order over
    its queues and wire names, less what earlier claims took), and no job twice."""
    now = harness.clock.now_ms()
    specs = [
        NewJobSpec(wire, b"", queue=queue, priority=priority, run_at_ms=now - n)
        for n, (queue, wire, priority) in enumerate(
            [(q, w, p) for q in ("q1", "q2", "q3") for w in (WIRE, OTHER_WIRE) for p in (0, 5, 9)]
        )
    ]
    harness.enqueue_specs(specs)
    jobs = {job.id: job for job in harness.all_jobs()}
    requests = [
        ClaimRequest("w1", ("q1", "q2"), (WIRE,), 2, LEASE_MS),
        ClaimRequest("w2", ("q1",), (WIRE, OTHER_WIRE), 3, LEASE_MS),
        ClaimRequest("w3", ("q2", "q3", "empty"), (WIRE,), 10, LEASE_MS),
        ClaimRequest("w4", ("q1", "q2"), (WIRE,), 5, LEASE_MS),
    ]

    answers = harness.ops.process(WorkBatch(claims=requests))

    left = dict(jobs)
    for request, claimed, drained in zip(requests, answers.claims, answers.drained, strict=True):
        fits = [j for j in left.values() if j.queue in request.queues and j.wire_name in request.wire_names]
        fits.sort(key=lambda j: (-j.priority, j.run_at_ms, j.id))
        expected = fits[: request.count]
        assert [c.job.id for c in claimed] == [j.id for j in expected], request.worker_id
        assert drained == (len(expected) < request.count), request.worker_id
        for job in expected:
            del left[job.id]
    assert [len(claimed) for claimed in answers.claims] == [2, 3, 5, 1]
    for job_id in set(jobs) - set(left):
        assert harness.job(job_id).state is JobState.RESERVED
    for job_id in left:
        assert harness.job(job_id).state is JobState.AVAILABLE
