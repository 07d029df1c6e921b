"""A transaction's writes on PostgreSQL are held and sent together, as one statement,
before whatever runs next on its connection (``store.pg_held``); SQLite sends each at
once. On both engines: a read after a write sees it, a row changed twice in one
transaction gets both changes, a failed guard or a failing held write rolls the whole
transaction back, and a taken idempotency key is still told apart from other errors.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from coordinator.domain.changes import JobChange
from coordinator.domain.evolve import evolve
from coordinator.domain.records import NewAttempt
from coordinator.domain.states import JobState
from coordinator.store import DuplicateKey, StoreError, Tx, WriteConflict
from coordinator.store.pg_held import HeldWrites
from coordinator.store.row_writes import RowUpdate
from coordinator.store.schema import attempts, jobs
from tests.unit.domain_doubles import JOB_RECORD

from .harness import QUEUE, Harness, sent_statements

NOW_MS = 5_000


def _writes(sent: list[tuple[str, Any]]) -> list[str]:
    return [sql for sql, _ in sent if not re.match(r"\s*SELECT", sql)]


def _job(number: int, **fields: Any) -> Any:
    fields.setdefault("idempotency_key", None)
    return evolve(JOB_RECORD, id=f"0190f0a0-0000-7000-8000-{number:012x}", **fields)


@pytest.mark.perf
def test_a_start_sends_every_write_in_one_statement_after_its_reads(harness: Harness) -> None:
    claimed = harness.claim_one(harness.enqueue(queue=QUEUE))
    sender = harness.holder(claimed.attempt_id)
    with sent_statements(executemany=True) as sent:
        assert harness.start(claimed.attempt_id, sender).granted
    if harness.store.postgres:
        # The job and the attempt, locked together; then the job's update, the
        # attempt's start and the count deltas together (a start's transition is read
        # back from its attempt: no row, ``store.history``).
        assert len(sent) == 2, [sql for sql, _ in sent]
        (written,) = [sql for sql, _ in sent if sql.startswith("WITH")]
        writes = ("UPDATE jobs", "UPDATE attempts", "queue_count_deltas")
        assert all(write in written for write in writes), written
        assert "INSERT INTO transitions" not in written
    else:
        assert len(_writes(sent)) >= 4  # each write on its own: no round trip to save
    assert harness.job(claimed.job.id).state is JobState.RUNNING
    assert harness.transitions(claimed.job.id)[-1]["to_state"] is JobState.RUNNING


@pytest.mark.perf
def test_an_enqueue_without_keys_sends_everything_in_one_statement_with_the_commit(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE)  # the queue exists: it is not looked up again
    with sent_statements(executemany=True) as sent:
        job_id = harness.enqueue(queue=QUEUE)
    if harness.store.postgres:
        # No key can be taken: the job, its first transition, the count deltas and the
        # notification all go out together, just before the commit.
        assert len(sent) == 1, [sql for sql, _ in sent]
        writes = ("INSERT INTO jobs", "INSERT INTO transitions", "queue_count_deltas", "pg_notify")
        assert all(write in sent[0][0] for write in writes), sent[0][0]
    assert harness.job(job_id).state is JobState.AVAILABLE
    assert len(harness.transitions(job_id)) == 1


@pytest.mark.perf
def test_an_enqueue_with_a_key_sends_its_rows_at_once_and_the_rest_with_the_commit(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE)
    with sent_statements(executemany=True) as sent:
        job_id = harness.enqueue(queue=QUEUE, idempotency_key="held-writes-key")
    if harness.store.postgres:
        # The job and its first transition at once, so that a taken key is told apart;
        # then the count deltas and the notification.
        inserts = [sql for sql, _ in sent if "INSERT INTO jobs" in sql]
        assert len(inserts) == 1 and "INSERT INTO transitions" in inserts[0]
        assert "queue_count_deltas" in sent[-1][0] and "pg_notify" in sent[-1][0]
        assert "INSERT INTO jobs" not in sent[-1][0]
    assert harness.job(job_id).state is JobState.AVAILABLE


def test_a_read_in_the_transaction_sees_the_writes_before_it(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    before = harness.job(job_id)

    def cancel_then_read(tx: Tx) -> JobState:
        tx.apply([JobChange(before, evolve(before, state=JobState.CANCELLED), reason="test")], NOW_MS)
        return tx.jobs_by_ids([job_id])[job_id].state

    assert harness.store.transact(cancel_then_read, what="a test") is JobState.CANCELLED
    assert harness.job(job_id).state is JobState.CANCELLED


def test_a_job_changed_twice_in_one_transaction_gets_both_changes(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    first = harness.job(job_id)
    paused = evolve(first, priority=7, history_seq=first.history_seq + 1)

    def twice(tx: Tx) -> None:
        tx.apply([JobChange(first, evolve(first, priority=7), reason="first")], NOW_MS)
        # Guarded by the first change's result: held together with it, the second
        # update would not see it and would match no row.
        tx.apply([JobChange(paused, evolve(paused, state=JobState.CANCELLED), reason="second")], NOW_MS)

    with sent_statements(executemany=True) as sent:
        harness.store.transact(twice, what="a test")
    job = harness.job(job_id)
    assert (job.priority, job.state, job.history_seq) == (7, JobState.CANCELLED, first.history_seq + 2)
    assert [t["reason"] for t in harness.transitions(job_id)][-2:] == ["first", "second"]
    if harness.store.postgres:
        assert len([sql for sql, _ in sent if "UPDATE jobs" in sql]) == 2  # the first went out first


def test_a_failed_guard_rolls_back_every_write_held_with_it(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    current = harness.job(job_id)
    stale = evolve(current, history_seq=current.history_seq + 3)
    other = _job(0x501, queue=QUEUE)

    def mixed(tx: Tx) -> None:
        tx.insert_jobs([other], NOW_MS)
        tx.insert_attempts([NewAttempt("attempt-held", job_id, current.generation, "w", NOW_MS)])
        tx.apply([JobChange(stale, evolve(stale, state=JobState.CANCELLED), reason="stale")], NOW_MS)

    with pytest.raises(WriteConflict):
        harness.store.transact(mixed, what="a test")
    assert harness.store.get_job(other.id) is None
    assert harness.attempts(job_id) == []
    assert harness.job(job_id) == current


def test_a_stale_write_held_to_the_end_of_a_begun_transaction_commits_nothing(harness: Harness) -> None:
    """A transaction that has begun (a read) and holds a stale write at its end: on
    PostgreSQL the guard fails when the last writes go out, just before the commit, and
    nothing of the transaction commits (SQLite: at the write)."""
    job_id = harness.enqueue(queue=QUEUE)
    current = harness.job(job_id)
    stale = evolve(current, history_seq=current.history_seq + 3)
    other = _job(0x505, queue=QUEUE)
    tries: list[int] = []

    def read_then_stale_change(tx: Tx) -> None:
        tries.append(1)
        tx.jobs_by_ids([job_id])
        tx.insert_jobs([other], NOW_MS, ids_made_here=True)
        tx.apply([JobChange(stale, evolve(stale, priority=2), reason="stale")], NOW_MS)

    with pytest.raises(WriteConflict) as raised:
        harness.store.transact(read_then_stale_change, what="a test")
    assert "job changed under a write" in str(raised.value)
    if harness.store.postgres:
        assert "0 of 1 rows matched by held update 1 of 1 (of jobs" in str(raised.value)
    assert len(tries) > 1  # a conflict: run again (and it conflicted every time)
    assert harness.store.get_job(other.id) is None
    assert harness.job(job_id) == current


def test_writes_held_to_the_end_of_a_begun_transaction_commit_when_guards_hold(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    current = harness.job(job_id)
    other = _job(0x506, queue=QUEUE)

    def read_then_change(tx: Tx) -> None:
        tx.jobs_by_ids([job_id])
        tx.insert_jobs([other], NOW_MS, ids_made_here=True)
        tx.apply([JobChange(current, evolve(current, priority=7), reason="test")], NOW_MS)

    harness.store.transact(read_then_change, what="a test")
    assert harness.job(job_id).priority == 7
    assert harness.store.get_job(other.id) is not None


def test_a_held_write_that_fails_after_a_read_writes_nothing(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    other = _job(0x507, queue=QUEUE)

    def read_then_orphan_attempt(tx: Tx) -> None:
        tx.jobs_by_ids([job_id])
        tx.insert_jobs([other], NOW_MS, ids_made_here=True)
        tx.insert_attempts([NewAttempt("attempt-orphan-2", "no-such-job", 1, "w", NOW_MS)])

    with pytest.raises(StoreError) as raised:
        harness.store.transact(read_then_orphan_attempt, what="a test")
    assert not isinstance(raised.value, (WriteConflict, DuplicateKey))
    assert harness.store.get_job(other.id) is None


def test_a_held_write_that_fails_fails_the_transaction_and_writes_nothing(harness: Harness) -> None:
    other = _job(0x502, queue=QUEUE)

    def orphan_attempt(tx: Tx) -> None:
        tx.insert_jobs([other], NOW_MS)
        # No such job: the foreign key fails, when the held writes go out on PostgreSQL.
        tx.insert_attempts([NewAttempt("attempt-orphan", "no-such-job", 1, "w", NOW_MS)])

    with pytest.raises(StoreError) as raised:
        harness.store.transact(orphan_attempt, what="a test")
    assert not isinstance(raised.value, (WriteConflict, DuplicateKey))  # not retried as one
    assert harness.store.get_job(other.id) is None


def test_a_taken_idempotency_key_is_a_duplicate_key_with_writes_held_before_it(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    current = harness.job(job_id)
    keyed = _job(0x503, queue=QUEUE, idempotency_key="taken")
    harness.store.transact(lambda tx: tx.insert_jobs([keyed], NOW_MS), what="a test")
    again = _job(0x504, queue=QUEUE, idempotency_key="taken")

    def held_then_taken(tx: Tx) -> None:
        tx.apply([JobChange(current, evolve(current, priority=3), reason="held")], NOW_MS)
        tx.insert_jobs([again], NOW_MS)

    with pytest.raises(DuplicateKey):
        harness.store.transact(held_then_taken, what="a test")
    assert harness.store.get_job(again.id) is None
    assert harness.job(job_id).priority == current.priority


def test_a_row_inserted_and_then_updated_in_one_transaction_gets_the_update(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    job = harness.job(job_id)

    def insert_then_start(tx: Tx) -> None:
        tx.insert_attempts([NewAttempt("attempt-fresh", job_id, job.generation, "w", NOW_MS)])
        # Held together with its insert, the update would not see the new row.
        tx.mark_started([("attempt-fresh", 1)], NOW_MS)

    with sent_statements(executemany=True) as sent:
        harness.store.transact(insert_then_start, what="a test")
    [attempt] = harness.attempts(job_id)
    assert (attempt.started_at_ms, attempt.execution_number) == (NOW_MS, 1)
    if harness.store.postgres:
        assert len([sql for sql, _ in sent if "INSERT INTO attempts" in sql]) == 1
        assert not any("INSERT INTO attempts" in sql and "UPDATE attempts" in sql for sql, _ in sent)


def test_an_update_found_by_another_column_than_the_key_goes_after_held_inserts_into_its_table() -> None:
    held = HeldWrites()
    by_id = RowUpdate(attempts, (("g_id", "id"),), (("v_n", "execution_number"),))
    by_job = RowUpdate(attempts, (("g_job", "job_id"),), (("v_n", "execution_number"),))
    assert not held.holds_any(by_job, [{"g_job": "j1", "v_n": 1}])
    held.insert(attempts, [{"id": "a1", "job_id": "j1"}])
    # By the primary key, only the row inserted is known to be held.
    assert held.holds_any(by_id, [{"g_id": "a1", "v_n": 1}])
    assert not held.holds_any(by_id, [{"g_id": "a2", "v_n": 1}])
    # By another column, any inserted row of the table may be the one.
    assert held.holds_any(by_job, [{"g_job": "j2", "v_n": 1}])
    assert not held.holds_any(
        RowUpdate(jobs, (("g_id", "id"),), (("v_p", "priority"),)), [{"g_id": "a1", "v_p": 1}]
    )
