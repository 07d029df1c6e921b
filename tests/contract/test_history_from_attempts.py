"""Issue 39: a start writes no transition row; the history reads it back from its attempt
(``store.history``), the same entry, at the same place, as the row it replaces, on both
engines. History written with a row per start (before this) reads unchanged, and a history
cut to ``max_history_per_job`` keeps exactly the entries a row per start kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.pool import NullPool

from coordinator.domain.states import JobState, Outcome
from coordinator.store.schema import transitions

from .harness import SECOND, Harness


def _rows(harness: Harness, job_id: str) -> list[tuple[int, str | None]]:
    """The job's transition rows as stored: (seq, reason)."""
    engine = create_engine(harness.store.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = select(transitions.c.seq, transitions.c.reason).where(transitions.c.job_id == job_id)
            return [(row.seq, row.reason) for row in conn.execute(query.order_by(transitions.c.seq))]
    finally:
        engine.dispose()


def _insert_row(harness: Harness, row: dict[str, Any]) -> None:
    engine = create_engine(harness.store.url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(transitions.insert(), [row])
    finally:
        engine.dispose()


def test_a_start_is_read_back_from_its_attempt_where_its_row_was(harness: Harness) -> None:
    job_id = harness.enqueue(queue="history")
    harness.clock.advance(SECOND)
    claimed = harness.claim_one(job_id)
    harness.clock.advance(SECOND)
    assert harness.start(claimed.attempt_id).granted
    started_at = harness.clock.now_ms()
    harness.clock.advance(SECOND)
    assert harness.report(claimed.attempt_id).accepted

    history = harness.transitions(job_id)
    assert [(t["seq"], t["from_state"], t["to_state"], t["reason"]) for t in history] == [
        (1, None, JobState.AVAILABLE, "enqueued"),
        (2, JobState.AVAILABLE, JobState.RESERVED, "claimed"),
        (3, JobState.RESERVED, JobState.RUNNING, "started"),
        (4, JobState.RUNNING, JobState.SUCCEEDED, "succeeded"),
    ]
    assert history[2] == {
        "job_id": job_id,
        "seq": 3,
        "at_ms": started_at,
        "from_state": JobState.RESERVED,
        "to_state": JobState.RUNNING,
        "attempt_id": claimed.attempt_id,
        "reason": "started",
    }
    assert harness.attempts(job_id)[0].started_at_ms == started_at
    assert _rows(harness, job_id) == [(1, "enqueued"), (2, "claimed"), (4, "succeeded")]


def test_a_claim_never_started_gets_no_start_entry(harness: Harness) -> None:
    job_id = harness.enqueue(queue="history")
    harness.release(harness.claim_one(job_id).attempt_id)
    reasons = [t["reason"] for t in harness.transitions(job_id)]
    assert reasons == ["enqueued", "claimed", "released"]


def test_history_written_with_a_row_per_start_reads_unchanged(harness: Harness) -> None:
    """A database written before this holds each start's row after its claim's: read as
    it is, never twice."""
    job_id = harness.enqueue(queue="history")
    claimed = harness.run(job_id)
    read_back = harness.transitions(job_id)
    _insert_row(harness, {**read_back[2], "from_state": "reserved", "to_state": "running"})
    assert harness.transitions(job_id) == read_back
    assert harness.report(claimed.attempt_id).accepted
    assert [t["seq"] for t in harness.transitions(job_id)] == [1, 2, 3, 4]
    assert harness.transitions(job_id)[:3] == read_back
    assert _rows(harness, job_id) == [(1, "enqueued"), (2, "claimed"), (3, "started"), (4, "succeeded")]


_Step = Callable[[Harness, str, dict[str, str]], None]


def _claim(h: Harness, job_id: str, held: dict[str, str]) -> None:
    held["attempt"] = h.claim_one(job_id).attempt_id


def _start(h: Harness, job_id: str, held: dict[str, str]) -> None:
    assert h.start(held["attempt"]).granted


def _fail(h: Harness, job_id: str, held: dict[str, str]) -> None:
    assert h.report(held["attempt"], Outcome.RETRYABLE_FAILURE, error_code="Boom").accepted


def _release(h: Harness, job_id: str, held: dict[str, str]) -> None:
    h.release(held["attempt"])


def _succeed(h: Harness, job_id: str, held: dict[str, str]) -> None:
    assert h.report(held["attempt"]).accepted


_LIFE: list[_Step] = [
    *(_claim, _start, _fail),
    *(_claim, _release),
    *(_claim, _start, _fail),
    *(_claim, _start, _succeed),
]
"""Starts at every place a cut can fall: right after their claim, and not."""


@pytest.mark.parametrize("keep", [1, 2, 3, 4, 5])
def test_a_cut_history_keeps_what_a_row_per_start_kept(harness: Harness, keep: int) -> None:
    """The same life for two jobs at the same times: one whose history is never cut, and
    one cut to ``keep`` entries, which must read as the newest ``keep`` of the first
    after every step (a cut that falls on a claim keeps its start as a row)."""
    small = harness.with_bounds(max_history_per_job=keep)
    whole_id, cut_id = harness.enqueue(queue="whole"), small.enqueue(queue="cut")
    whole_held: dict[str, str] = {}
    cut_held: dict[str, str] = {}
    start_rows = 0
    for step in _LIFE:
        harness.clock.advance(11 * SECOND)  # past the retry delays (5 s, then 10 s), within the lease
        step(harness, whole_id, whole_held)
        step(small, cut_id, cut_held)
        whole, cut = _comparable(harness, whole_id), _comparable(small, cut_id)
        assert cut == whole[-keep:], (step.__name__, cut, whole)
        start_rows += sum(1 for _, reason in _rows(small, cut_id) if reason == "started")
    assert small.job(cut_id).state is JobState.SUCCEEDED
    assert start_rows  # some cut fell on a claim: its start was kept as a row
    assert not [reason for _, reason in _rows(harness, whole_id) if reason == "started"]
    assert len(_rows(small, cut_id)) <= keep


def _comparable(harness: Harness, job_id: str) -> list[tuple[Any, ...]]:
    """The history with each attempt named by its place among the job's attempts."""
    places = {attempt.id: n for n, attempt in enumerate(harness.attempts(job_id))}
    return [
        (t.seq, t.at_ms, t.from_state, t.to_state, t.reason, places.get(t.attempt_id or ""))
        for t in map(dataclasses.replace, harness.store.list_transitions(job_id))
    ]


def test_purge_removes_the_read_back_starts_with_the_job(harness: Harness) -> None:
    job_id = harness.enqueue(queue="history")
    harness.report(harness.run(job_id).attempt_id)
    harness.clock.advance(10 * 24 * 3600 * SECOND)
    assert harness.store.transact(
        lambda tx: tx.purge(JobState.SUCCEEDED, harness.clock.now_ms(), 10), what="a test"
    )
    assert harness.store.list_transitions(job_id) == []
    engine = create_engine(harness.store.url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            left = conn.execute(select(func.count()).select_from(transitions)).scalar()
    finally:
        engine.dispose()
    assert left == 0
