"""Every read of a transaction sees every write of that transaction, on both engines:
on PostgreSQL the writes held back (``store.pg_held``) go out before any read, so a claim
finds the jobs its own transaction inserted and changed in the database, as it finds any
other job. A guarded write that failed keeps the transaction from committing, even when
its ``WriteConflict`` was caught, and names the write that failed.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from coordinator.domain.changes import JobChange
from coordinator.domain.evolve import evolve
from coordinator.domain.states import JobState
from coordinator.store import Tx, WriteConflict
from coordinator.store.claims import ClaimWanted
from tests.unit.domain_doubles import JOB_RECORD

from .harness import QUEUE, WIRE, Harness, sent_statements

NOW_MS = 5_000


def _job(number: int, **fields: Any) -> Any:
    return evolve(
        JOB_RECORD,
        id=f"0190f0a0-0000-7000-8000-{number:012x}",
        idempotency_key=None,
        queue=QUEUE,
        wire_name=WIRE,
        run_at_ms=NOW_MS - 1,
        **fields,
    )


def test_a_claim_reads_the_jobs_its_transaction_inserted_and_changed(harness: Harness) -> None:
    plain, raised, cancelled = _job(0x701), _job(0x702), _job(0x703)

    def insert_change_claim(tx: Tx) -> list[tuple[str, int, int]]:
        tx.insert_jobs([plain, raised, cancelled], NOW_MS, ids_made_here=True)
        tx.apply(
            [
                JobChange(raised, evolve(raised, priority=9), reason="raised"),
                JobChange(cancelled, evolve(cancelled, state=JobState.CANCELLED), reason="cancelled"),
            ],
            NOW_MS,
        )
        (found,) = tx.claim([ClaimWanted((QUEUE,), (WIRE,), 5)], NOW_MS)
        return [(job.id, job.priority, job.history_seq) for job in found.jobs]

    with sent_statements(executemany=True) as sent:
        claimed = harness.store.transact(insert_change_claim, what="a test")
    # The raised job first, as the update left it; the cancelled one not at all.
    assert claimed == [
        (raised.id, 9, raised.history_seq + 1),
        (plain.id, plain.priority, plain.history_seq),
    ]
    if harness.store.postgres:
        statements = [sql for sql, _ in sent]
        (insert,) = [i for i, sql in enumerate(statements) if "INSERT INTO jobs" in sql]
        reads = [i for i, sql in enumerate(statements) if re.match(r"\s*SELECT", sql)]
        assert reads and min(reads) > insert, statements  # the claim read the database


def test_a_read_after_a_guarded_update_sees_it(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    before = harness.job(job_id)

    now = harness.clock.now_ms()

    def raise_then_read(tx: Tx) -> tuple[int, int]:
        tx.apply([JobChange(before, evolve(before, priority=4), reason="test")], now)
        (found,) = tx.claim([ClaimWanted((QUEUE,), (WIRE,), 1)], now)
        (job,) = found.jobs
        return job.priority, job.history_seq

    assert harness.store.transact(raise_then_read, what="a test") == (4, before.history_seq + 1)


def test_a_caught_failed_guard_still_keeps_the_transaction_from_committing(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    current = harness.job(job_id)
    stale = evolve(current, history_seq=current.history_seq + 3)
    other = _job(0x704)
    caught: list[WriteConflict] = []

    with pytest.raises(WriteConflict), harness.store.write() as tx:
        tx.insert_jobs([other], NOW_MS, ids_made_here=True)
        try:
            tx.apply([JobChange(stale, evolve(stale, state=JobState.CANCELLED), reason="stale")], NOW_MS)
            tx.jobs_by_ids([job_id])  # a read: on PostgreSQL the held writes go out here
        except WriteConflict as conflict:
            caught.append(conflict)
    assert len(caught) == 1
    assert harness.store.get_job(other.id) is None
    assert harness.job(job_id) == current


def test_a_failed_held_guard_names_the_write(harness: Harness) -> None:
    job_id = harness.enqueue(queue=QUEUE)
    current = harness.job(job_id)
    stale = evolve(current, history_seq=current.history_seq + 3)

    def stale_change(tx: Tx) -> None:
        tx.insert_jobs([_job(0x705)], NOW_MS, ids_made_here=True)
        tx.apply([JobChange(stale, evolve(stale, priority=2), reason="stale")], NOW_MS)

    with pytest.raises(WriteConflict) as raised, harness.store.write() as tx:
        stale_change(tx)
    assert "job changed under a write" in str(raised.value)
    if harness.store.postgres:  # held: sent with the commit's statement, and named there
        assert "0 of 1 rows matched by held update 1 of 1 (of jobs" in str(raised.value)
