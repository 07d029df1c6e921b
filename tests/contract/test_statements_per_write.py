"""What a write sends to the database, on both engines: the statements the hot path saves.

- Job count deltas are summed per transaction and appended once before the commit, so
  an enqueue that claims its own jobs writes one delta statement, not one per step, and
  the counts still agree with the jobs.
- Queue rows are never deleted, so a queue this store saw committed is not looked up
  again by later enqueues; one whose registration rolled back is looked up (and made)
  again.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState
from coordinator.service.work import AttemptMessage, ClaimRequest, WorkBatch

from .harness import LEASE_MS, QUEUE, WIRE, WORKER, Harness, sent_statements


def _count(sent: list[tuple[str, Any]], pattern: str) -> int:
    return sum(1 for sql, _ in sent if re.search(pattern, sql))


def _counts(harness: Harness, queue: str) -> dict[JobState, int]:
    (stats,) = [s for s in harness.store.queue_stats(harness.clock.now_ms()) if s.queue.name == queue]
    return {state: n for state, n in stats.counts.items() if n}


@pytest.mark.perf
def test_an_enqueue_that_claims_appends_its_count_deltas_once(harness: Harness) -> None:
    claims = [ClaimRequest(WORKER, (QUEUE,), (WIRE,), 2, LEASE_MS)]
    specs = [NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(3)]
    with sent_statements(executemany=True) as sent:
        enqueued, answers = harness.enqueue_claiming(specs, claims)
    assert len(enqueued) == 3 and len(answers.claims[0]) == 2
    # Enqueued (+3 available), then claimed (-2 available, +2 reserved): one statement.
    assert _count(sent, r"INSERT INTO queue_count_deltas") == 1
    # No insert asks for the keys the database made (PostgreSQL would send one row back each).
    assert _count(sent, r"^INSERT INTO (?s:.*)RETURNING") == 0
    assert _counts(harness, QUEUE) == {JobState.AVAILABLE: 1, JobState.RESERVED: 2}


def test_counts_written_in_a_transaction_that_folds_are_folded_with_it(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE)

    def enqueue_and_fold(tx: Any) -> int:
        harness.jobs.enqueue_in(tx, [NewJobSpec(WIRE, b"{}", queue=QUEUE)])
        return tx.fold_queue_counts()

    assert harness.store.transact(enqueue_and_fold, what="a test") >= 2
    assert _counts(harness, QUEUE) == {JobState.AVAILABLE: 2}


@pytest.mark.perf
def test_a_queue_seen_committed_is_not_looked_up_again(harness: Harness) -> None:
    harness.enqueue(queue="billing")
    with sent_statements(executemany=True) as sent:
        harness.enqueue(queue="billing")
        harness.enqueue(queue="billing")
    assert _count(sent, r"FROM queues\s+WHERE") == 0
    assert _counts(harness, "billing") == {JobState.AVAILABLE: 3}
    with sent_statements(executemany=True) as sent:
        harness.enqueue(queue="reports")  # a queue this store has not seen: looked up, made
    assert _count(sent, r"FROM queues\s+WHERE") == 1
    assert {s.queue.name for s in harness.store.queue_stats(harness.clock.now_ms())} >= {"billing", "reports"}


class _Abandoned(Exception):
    pass


def test_a_queue_whose_registration_rolled_back_is_made_again(harness: Harness) -> None:
    def enqueue_then_fail(tx: Any) -> None:
        harness.jobs.enqueue_in(tx, [NewJobSpec(WIRE, b"{}", queue="rolled-back")])
        raise _Abandoned  # after the queue row was written: the transaction rolls back

    with pytest.raises(_Abandoned):
        harness.store.transact(enqueue_then_fail, what="a test")
    assert "rolled-back" not in {s.queue.name for s in harness.store.queue_stats(harness.clock.now_ms())}
    with sent_statements(executemany=True) as sent:
        harness.enqueue(queue="rolled-back")
    assert _count(sent, r"FROM queues\s+WHERE") == 1
    assert _counts(harness, "rolled-back") == {JobState.AVAILABLE: 1}


@pytest.mark.perf
def test_a_start_reads_its_attempt_and_job_in_as_few_statements_as_the_engine_allows(
    harness: Harness,
) -> None:
    """SQLite's single writer holds the database from BEGIN IMMEDIATE on, so the attempt
    is read first and names its job: two reads. PostgreSQL locks the job and the attempt
    in one statement, found through the attempt, so a result committed on another
    replica meanwhile is seen (``Tx.attempts_with_their_jobs``): one read."""
    claimed = harness.claim_one(harness.enqueue(queue=QUEUE))
    sender = harness.holder(claimed.attempt_id)  # read before, not counted
    with sent_statements(executemany=True) as sent:
        answer = harness.start(claimed.attempt_id, sender)
    assert answer.granted
    reads = [sql for sql, _ in sent if re.match(r"\s*SELECT", sql)]
    if harness.store.postgres:
        [read] = reads
        assert re.search(r"FROM jobs JOIN attempts\b(?s:.*)FOR UPDATE$", read.strip()), read
    else:
        assert len(reads) == 2, reads
        assert not [sql for sql in reads if "FOR UPDATE" in sql]
    assert harness.job(claimed.job.id).state is JobState.RUNNING


@pytest.mark.perf
def test_sessions_claiming_in_one_transaction_ask_again_only_where_work_may_be_left(
    harness: Harness,
) -> None:
    """Every session with credit claims in an enqueue's transaction. Once a claim finds
    fewer jobs than it asked for, the queue has none left for its wire names in this
    transaction, and the next sessions' claims for them skip the read; a session that
    takes other wire names still reads, and takes its own job."""
    other_wire = WIRE + ".other"
    claims = [
        ClaimRequest("worker-a", (QUEUE,), (WIRE,), 5, LEASE_MS),
        ClaimRequest("worker-b", (QUEUE,), (WIRE,), 5, LEASE_MS),
        ClaimRequest("worker-c", (QUEUE,), (WIRE,), 5, LEASE_MS),
        ClaimRequest("worker-d", (QUEUE,), (WIRE, other_wire), 5, LEASE_MS),
    ]
    specs = [NewJobSpec(WIRE, b"{}", queue=QUEUE), NewJobSpec(other_wire, b"{}", queue=QUEUE)]
    with sent_statements(executemany=True) as sent:
        _, answers = harness.enqueue_claiming(specs, claims)
    # worker-a asked for five, found one (of its wire name): the queue is empty of WIRE.
    assert [[c.job.wire_name for c in claimed] for claimed in answers.claims] == [
        [WIRE],
        [],
        [],
        [other_wire],
    ]
    # (On PostgreSQL the first is also the read of the queue's controls.)
    claim_reads = [sql for sql, _ in sent if "ORDER BY jobs.priority DESC" in sql]
    assert len(claim_reads) == 2  # worker-a's, and worker-d's for the wire name not yet seen empty
    assert _counts(harness, QUEUE) == {JobState.RESERVED: 2}


def test_a_claim_that_filled_its_count_leaves_the_next_session_to_read_again(harness: Harness) -> None:
    for _ in range(3):
        harness.enqueue(queue=QUEUE)
    claims = [
        ClaimRequest("worker-a", (QUEUE,), (WIRE,), 2, LEASE_MS),
        ClaimRequest("worker-b", (QUEUE,), (WIRE,), 2, LEASE_MS),
    ]
    answers = harness.ops.process(WorkBatch(claims=claims))
    assert [len(claimed) for claimed in answers.claims] == [2, 1]


def _notifications(sent: list[tuple[str, Any]]) -> int:
    return _count(sent, r"pg_notify")


@pytest.mark.perf
def test_an_enqueue_whose_claims_take_every_new_job_wakes_no_other_replica(harness: Harness) -> None:
    """PostgreSQL notifies the other replicas of claimable jobs at the commit; when the
    enqueue's own claims reserved them all, nobody else could claim one, so no
    notification is sent (SQLite, one process, never sends one)."""
    claims = [ClaimRequest(WORKER, (QUEUE,), (WIRE,), 5, LEASE_MS)]
    with sent_statements() as sent:
        harness.enqueue_claiming([NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(2)], claims)
    assert _notifications(sent) == 0
    assert _counts(harness, QUEUE) == {JobState.RESERVED: 2}


def test_jobs_an_enqueue_left_unclaimed_are_announced_once(harness: Harness) -> None:
    claims = [ClaimRequest(WORKER, (QUEUE,), (WIRE,), 1, LEASE_MS)]  # one of the two
    with sent_statements() as sent:
        harness.enqueue_claiming([NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(2)], claims)
        harness.jobs.enqueue([NewJobSpec(WIRE + ".nobody", b"{}", queue=QUEUE) for _ in range(3)])
    assert _notifications(sent) == (2 if harness.store.postgres else 0)  # one per transaction
    assert _counts(harness, QUEUE) == {JobState.RESERVED: 1, JobState.AVAILABLE: 4}


def test_a_batch_over_one_statements_worth_of_attempts_finds_and_locks_every_job(harness: Harness) -> None:
    """Past 1,000 attempts a batch's reads go out in chunks (both engines cap a
    statement's parameters); on PostgreSQL the jobs are then locked in one id order over
    all the chunks, so two such batches cannot deadlock. Every start is granted."""
    total = 1_010
    for start in range(0, total, 500):
        harness.enqueue_specs([NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(min(500, total - start))])
    claimed = []
    while len(claimed) < total:
        claimed += harness.claim(128, queues=(QUEUE,))
    starts = [AttemptMessage(c.attempt_id, harness.holder(c.attempt_id)) for c in claimed]
    answers = harness.ops.process(WorkBatch(starts=starts))
    assert len(answers.starts) == total and all(answer.granted for answer in answers.starts)
    assert _counts(harness, QUEUE) == {JobState.RUNNING: total}


@pytest.mark.perf
def test_a_result_of_a_job_without_children_reads_the_dependencies_once(harness: Harness) -> None:
    """Ending a job reads which of the ended jobs have children; only for those are the
    waiting children read and the outputs recorded (R-15, R-16)."""
    claimed = harness.run(harness.enqueue(queue=QUEUE))
    sender = harness.holder(claimed.attempt_id)  # read before, not counted
    with sent_statements(executemany=True) as sent:
        assert harness.report(claimed.attempt_id, sender=sender).accepted
    dependency_statements = [sql for sql, _ in sent if "dependencies" in sql]
    assert len(dependency_statements) == 1 and "DISTINCT" in dependency_statements[0]


@pytest.mark.perf
def test_a_batch_of_claims_only_reads_no_attempts(harness: Harness) -> None:
    """An enqueue's claims (or a batch with nothing but claims) name no attempt: no
    attempt or job is read for them before the claim's own reads."""
    harness.enqueue(queue=QUEUE)
    with sent_statements() as sent:
        [claimed] = harness.ops.process(
            WorkBatch(claims=[ClaimRequest(WORKER, (QUEUE,), (WIRE,), 1, LEASE_MS)])
        ).claims
    assert len(claimed) == 1
    assert not [sql for sql, _ in sent if "attempts.id" in sql and sql.lstrip().startswith("SELECT")]
    reads = [sql for sql, _ in sent if sql.lstrip().startswith("SELECT")]
    assert "queues" in reads[0]  # the claim's own first read: the queue's controls


@pytest.mark.perf
def test_a_claim_of_one_queue_reads_the_queues_controls_with_its_jobs_on_postgresql(harness: Harness) -> None:
    """The claim of a batch whose claims name one queue: on PostgreSQL the queue's controls
    (R-17) come with its claimable jobs, one read before the claim goes out instead of
    two; SQLite, whose reads cost no round trip, reads the controls on their own."""
    job_id = harness.enqueue(queue=QUEUE)
    with sent_statements() as sent:
        claimed = harness.claim(5, queues=(QUEUE,))
    assert [c.job.id for c in claimed] == [job_id]
    reads = [sql for sql, _ in sent if re.match(r"\s*SELECT", sql)]
    queue_reads = [sql for sql in reads if re.search(r"\b(FROM|JOIN) queues\b", sql)]
    if harness.store.postgres:
        assert len(queue_reads) == 1 and re.search(r"\bFROM jobs\b", queue_reads[0]), reads
    else:
        assert len(queue_reads) == 1 and not re.search(r"\bFROM jobs\b", queue_reads[0]), reads
        assert _count(sent, r"SELECT jobs\.id(?s:.*)ORDER BY jobs\.priority DESC") == 1


def test_a_claim_of_a_queue_never_seen_takes_nothing_and_changes_nothing(harness: Harness) -> None:
    """No row, so no controls (the claim may take from it) and no jobs: on PostgreSQL the
    one read still answers, with the queue's columns empty."""
    harness.enqueue(queue=QUEUE)
    assert harness.claim(5, queues=("never-seen",)) == []
    assert _counts(harness, QUEUE) == {JobState.AVAILABLE: 1}
