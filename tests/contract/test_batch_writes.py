"""A batch's rows go out in one statement on PostgreSQL, as arrays from
``pg_arrays.MIN_ROWS`` rows on and as one parameter a column and row below it
(``store.pg_arrays``, ``store.pg_held``), and through the driver's ``executemany`` on
SQLite: on every path, every column type comes back as written, and a guarded update
with one stale row changes no row at all."""

from __future__ import annotations

import pytest

from coordinator.domain.changes import JobChange
from coordinator.domain.evolve import evolve
from coordinator.domain.records import JobRecord
from coordinator.domain.states import JobState
from coordinator.store import Store, WriteConflict, pg_arrays
from tests.unit.domain_doubles import JOB_RECORD

from .harness import sent_statements

NOW_MS = 5_000


def _jobs(count: int = 3) -> list[JobRecord]:
    """Jobs whose columns hold the awkward values: NULLs in every nullable column,
    bytes that are not UTF-8 and hold NUL, text outside ASCII and text with quotes,
    braces, commas, a backslash and the word NULL, integers past 2**32;
    beyond the first three, plain ones."""
    bare = evolve(
        JOB_RECORD,
        id="0190f0a0-0000-7000-8000-0000000000b1",
        idempotency_key=None,
        execution_timeout_ms=None,
        unique_key=None,
    )
    full = evolve(
        JOB_RECORD,
        id="0190f0a0-0000-7000-8000-0000000000b2",
        payload=b"\x00\xff\xfe binary",
        idempotency_key="ключ-🔑",
        unique_key="ユニーク",
        run_at_ms=2**53,
        execution_timeout_ms=2**40,
        priority=-7,
        cancel_requested=True,
    )
    # What an array's text form would have to quote or would read as NULL.
    quoted = 'k-3 "{a,b}" \\ NULL'
    empty = evolve(JOB_RECORD, id="0190f0a0-0000-7000-8000-0000000000b3", payload=b"", idempotency_key=quoted)
    plain = [
        evolve(JOB_RECORD, id=f"0190f0a0-0000-7000-8000-{n:012x}", idempotency_key=f"k-{n}")
        for n in range(0x100, 0x100 + max(count - 3, 0))
    ]
    return [bare, full, empty, *plain][:count]


# A batch goes through executemany on SQLite. On PostgreSQL inserts and updates go as
# arrays from MIN_ROWS rows on; below it, an insert is one VALUES row and an update one
# plain update per row, with a parameter a column, in the same statement.
SIZES = pytest.mark.parametrize("count", [3, pg_arrays.MIN_ROWS], ids=["few rows", "many rows"])


@SIZES
def test_every_column_type_is_written_as_given(store: Store, count: int) -> None:
    written = _jobs(count)
    with sent_statements(executemany=True) as sent:
        store.transact(lambda tx: tx.insert_jobs(written, NOW_MS), what="a test")
    assert [store.get_job(job.id) for job in written] == written
    inserts = [sql for sql, _ in sent if "INSERT INTO jobs" in sql]
    assert len(inserts) == 1  # one statement for all the rows, on either engine
    # PostgreSQL: arrays for many rows, and the first transitions in the same statement.
    assert ("unnest(" in inserts[0]) is (store.postgres and count >= pg_arrays.MIN_ROWS)
    assert ("INSERT INTO transitions" in inserts[0]) is store.postgres


@SIZES
def test_a_guarded_update_with_one_stale_row_changes_no_row(store: Store, count: int) -> None:
    written = _jobs(count)
    store.transact(lambda tx: tx.insert_jobs(written, NOW_MS), what="a test")
    stale = evolve(written[1], history_seq=written[1].history_seq + 5)  # read long ago
    befores = [written[0], stale, *written[2:]]
    changes = [JobChange(job, evolve(job, state=JobState.CANCELLED), reason="test") for job in befores]

    with pytest.raises(WriteConflict):
        store.transact(lambda tx: tx.apply(changes, NOW_MS), what="a test")
    assert [store.get_job(job.id) for job in written] == written
    assert [len(store.list_transitions(job.id)) for job in written] == [1] * count

    fresh = [JobChange(job, evolve(job, state=JobState.CANCELLED), reason="test") for job in written]
    store.transact(lambda tx: tx.apply(fresh, NOW_MS), what="a test")
    after = [store.get_job(job.id) for job in written]
    assert [job.state if job else None for job in after] == [JobState.CANCELLED] * count
    assert [job.history_seq if job else None for job in after] == [2] * count
