"""An enqueue whose batch claims for waiting workers in the same transaction (an enqueue
item of ``WorkerOps.process`` with the batch's claims) takes its new jobs in claim order
with the jobs already waiting, never one job twice.

The claim reads the new jobs from the database, as any claim does: on PostgreSQL their
held insert goes out before the claim's first read (``store.pg_held``). On both engines the
rows end as a separate claim would leave them, and a stale guard still fails the whole
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.changes import JobChange
from coordinator.domain.evolve import evolve
from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState
from coordinator.service.queues import QueueService
from coordinator.service.work import BatchAnswers, ClaimRequest
from coordinator.store import Tx, WriteConflict
from tests.unit.domain_doubles import JOB_RECORD

from .harness import LEASE_MS, OPERATOR, OTHER_WIRE, QUEUE, WIRE, WORKER, Harness, sent_statements

NOW_MS = 5_000


def _request(count: int, worker_id: str = WORKER, queues: tuple[str, ...] = (QUEUE,)) -> ClaimRequest:
    return ClaimRequest(worker_id, queues, (WIRE, OTHER_WIRE), count, LEASE_MS)


def _enqueue_claiming(
    harness: Harness, specs: Sequence[NewJobSpec], requests: Sequence[ClaimRequest]
) -> tuple[list[str], BatchAnswers]:
    """Enqueues ``specs`` and claims for ``requests`` in one transaction."""
    enqueued, answers = harness.enqueue_claiming(specs, requests)
    return [item.job_id for item in enqueued], answers


def _claimed_ids(answers: BatchAnswers) -> list[list[str]]:
    return [[item.job.id for item in claims] for claims in answers.claims]


def test_an_enqueue_claims_its_new_job_as_a_separate_claim_would(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE)  # the queue is known, and a job of it is claimed first
    harness.claim_one()
    with sent_statements(executemany=True) as sent:
        (job_id,), answers = _enqueue_claiming(harness, [NewJobSpec(WIRE, b"{}", queue=QUEUE)], [_request(5)])
    assert _claimed_ids(answers) == [[job_id]]
    claimed = answers.claims[0][0]
    job = harness.job(job_id)
    assert (job.state, job.current_attempt_id) == (JobState.RESERVED, claimed.attempt_id)
    assert job.worker_id == WORKER
    assert job.history_seq == claimed.job.history_seq
    history = harness.transitions(job_id)
    assert [(t["to_state"], t["seq"]) for t in history] == [
        (JobState.AVAILABLE, job.history_seq - 1),
        (JobState.RESERVED, job.history_seq),
    ]
    assert [attempt.id for attempt in harness.attempts(job_id)] == [claimed.attempt_id]
    assert harness.start(claimed.attempt_id).granted
    if harness.store.postgres:
        statements = [sql for sql, _ in sent]
        reads = [i for i, sql in enumerate(statements) if re.match(r"\s*SELECT", sql)]
        (insert,) = [i for i, sql in enumerate(statements) if "INSERT INTO jobs" in sql]
        assert reads and min(reads) > insert, statements  # the job is sent before the claim reads


def test_an_enqueues_claims_take_the_jobs_waiting_and_its_own_in_claim_order(harness: Harness) -> None:
    older = harness.enqueue(queue=QUEUE)
    harness.clock.advance(1_000)  # the new jobs' run-at comes after the older job's
    specs = [
        NewJobSpec(WIRE, b"{}", queue=QUEUE, priority=5),  # before the older job
        NewJobSpec(WIRE, b"{}", queue=QUEUE),  # after it
    ]
    (urgent, later), answers = _enqueue_claiming(harness, specs, [_request(2)])
    assert _claimed_ids(answers) == [[urgent, older]]
    assert harness.job(later).state is JobState.AVAILABLE
    assert [c.job.id for c in harness.claim(5)] == [later]


def test_two_claims_of_one_enqueue_never_take_the_same_new_job(harness: Harness) -> None:
    (job_id,), answers = _enqueue_claiming(
        harness, [NewJobSpec(WIRE, b"{}", queue=QUEUE)], [_request(3, "worker-a"), _request(3, "worker-b")]
    )
    assert _claimed_ids(answers) == [[job_id], []]
    assert len(harness.attempts(job_id)) == 1
    assert harness.job(job_id).worker_id == "worker-a"


def test_an_enqueue_does_not_claim_its_jobs_that_are_not_due_or_not_asked_for(harness: Harness) -> None:
    specs = [
        NewJobSpec(WIRE, b"{}", queue=QUEUE, run_at_ms=harness.clock.now_ms() + 60_000),
        NewJobSpec(WIRE, b"{}", queue="elsewhere"),
        NewJobSpec("reports.build", b"{}", queue=QUEUE),
    ]
    job_ids, answers = _enqueue_claiming(harness, specs, [_request(5)])
    assert _claimed_ids(answers) == [[]]
    assert [harness.job(job_id).state for job_id in job_ids] == [
        JobState.SCHEDULED,
        JobState.AVAILABLE,
        JobState.AVAILABLE,
    ]


def test_an_enqueue_claiming_from_a_limited_queue_counts_its_new_jobs(harness: Harness) -> None:
    harness.run(harness.enqueue(queue="limited"))  # one of the limit's two taken
    QueueService(harness.store, harness.clock, CoordinatorConfig()).set_limit("limited", 2, OPERATOR)
    specs = [NewJobSpec(WIRE, b"{}", queue="limited") for _ in range(2)]
    new_jobs, answers = _enqueue_claiming(harness, specs, [_request(5, queues=("limited",))])
    taken = min(new_jobs)  # one run-at: claim order is the IDs' order
    assert _claimed_ids(answers) == [[taken]]
    assert [harness.job(job_id).state for job_id in new_jobs if job_id != taken] == [JobState.AVAILABLE]


def _job(number: int, **fields: Any) -> Any:
    return evolve(JOB_RECORD, id=f"0190f0a0-0000-7000-8000-{number:012x}", idempotency_key=None, **fields)


def test_a_stale_guard_on_a_new_job_not_sent_yet_rolls_the_transaction_back(harness: Harness) -> None:
    new = _job(0x601, queue=QUEUE)
    stale = evolve(new, history_seq=new.history_seq + 2)

    def insert_then_change(tx: Tx) -> None:
        tx.insert_jobs([new], NOW_MS, ids_made_here=True)
        tx.apply([JobChange(stale, evolve(stale, priority=9), reason="stale")], NOW_MS)

    with pytest.raises(WriteConflict):
        harness.store.transact(insert_then_change, what="a test")
    assert harness.store.get_job(new.id) is None


def test_a_read_after_a_new_job_not_sent_yet_sees_it_and_its_change(harness: Harness) -> None:
    new = _job(0x602, queue=QUEUE)

    def insert_change_read(tx: Tx) -> tuple[JobState, int]:
        tx.insert_jobs([new], NOW_MS, ids_made_here=True)
        tx.apply([JobChange(new, evolve(new, state=JobState.CANCELLED), reason="test")], NOW_MS)
        read = tx.jobs_by_ids([new.id])[new.id]
        return read.state, read.history_seq

    state, seq = harness.store.transact(insert_change_read, what="a test")
    assert (state, seq) == (JobState.CANCELLED, new.history_seq + 1)
    assert [t["reason"] for t in harness.transitions(new.id)] == ["enqueued", "test"]


def test_a_batch_enqueue_claiming_part_of_itself_keeps_the_queue_counts_true(harness: Harness) -> None:
    specs = [NewJobSpec(WIRE, b"{}", queue="counted") for _ in range(20)]
    job_ids, answers = _enqueue_claiming(
        harness, specs, [_request(5, "worker-a", ("counted",)), _request(3, "worker-b", ("counted",))]
    )
    first, second = _claimed_ids(answers)
    assert first + second == sorted(job_ids)[:8]  # one run-at: claim order is the IDs' order
    for claimed in answers.claims[0] + answers.claims[1]:
        assert [a.id for a in harness.attempts(claimed.job.id)] == [claimed.attempt_id]
    (stats,) = [s for s in harness.store.queue_stats(harness.clock.now_ms()) if s.queue.name == "counted"]
    assert {state: count for state, count in stats.counts.items() if count} == {
        JobState.RESERVED: 8,
        JobState.AVAILABLE: 12,
    }
    states = [harness.job(job_id).state for job_id in job_ids]
    assert states.count(JobState.RESERVED) == 8 and states.count(JobState.AVAILABLE) == 12


def test_an_enqueue_into_a_paused_queue_claims_none_of_its_new_jobs(harness: Harness) -> None:
    """The queue's controls hold for the transaction's own new jobs too."""
    waiting = harness.enqueue(queue=QUEUE)
    queues = QueueService(harness.store, harness.clock, CoordinatorConfig())
    queues.pause(QUEUE, OPERATOR)
    new_jobs, answers = _enqueue_claiming(harness, [NewJobSpec(WIRE, b"{}", queue=QUEUE)], [_request(5)])
    assert _claimed_ids(answers) == [[]]
    assert [harness.job(job_id).state for job_id in [waiting, *new_jobs]] == [JobState.AVAILABLE] * 2
    queues.resume(QUEUE, OPERATOR)
    assert sorted(c.job.id for c in harness.claim(5, queues=(QUEUE,))) == sorted([waiting, *new_jobs])
