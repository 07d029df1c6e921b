"""Reads: get, list with filters and keyset paging (docs/limits.md max_page_size, docs/scaling.md), attempts
oldest first, and the bounded transition history (docs/limits.md)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.domain.records import NewJobSpec
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument, NotFound
from coordinator.store.store import HISTORY_LIMIT

from .harness import LEASE_MS, OTHER_WIRE, WIRE, Harness


def _enqueue_spread(harness: Harness, specs: list[NewJobSpec]) -> list[str]:
    """One job per millisecond, so creation order is ID order (UUIDv7)."""
    ids = []
    for spec in specs:
        ids += [e.job_id for e in harness.enqueue_specs([spec])]
        harness.clock.advance(1)
    return ids


def _all_pages(
    harness: Harness,
    page_size: int,
    *,
    queue: str | None = None,
    state: JobState | None = None,
    wire_name: str | None = None,
) -> list[list[str]]:
    """Follows page tokens to the end and returns each page's job IDs."""
    pages: list[list[str]] = []
    token = ""
    while True:
        page, token = harness.jobs.list_jobs(
            queue=queue, state=state, wire_name=wire_name, page_size=page_size, page_token=token
        )
        pages.append([job.id for job in page])
        if not token:
            return pages
        assert len(pages) < 100, "paging does not end"


def test_get_job_returns_the_stored_job(harness: Harness) -> None:
    job_id = harness.enqueue(payload=b"\x00\x01binary")

    job = harness.jobs.get_job(job_id)

    assert job == harness.job(job_id)
    assert job.payload == b"\x00\x01binary"
    assert harness.jobs.get_job(job_id.upper()).id == job_id


def test_get_job_refuses_unknown_and_malformed_ids(harness: Harness) -> None:
    with pytest.raises(NotFound):
        harness.jobs.get_job("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")
    with pytest.raises(InvalidArgument):
        harness.jobs.get_job("0_93a7c25b1e7c3d9f001a2b3c4d5e6f")
    with pytest.raises(NotFound):
        harness.jobs.list_attempts("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")


def test_list_jobs_is_newest_first_without_payloads(harness: Harness) -> None:
    ids = _enqueue_spread(harness, [NewJobSpec(WIRE, b"payload") for _ in range(5)])

    page, token = harness.jobs.list_jobs(queue=None, state=None, wire_name=None, page_size=0, page_token="")

    assert [job.id for job in page] == ids[::-1]
    assert token == ""
    assert {job.payload for job in page} == {b""}  # list views carry no payload


def test_list_jobs_filters_by_queue_state_and_wire_name(harness: Harness) -> None:
    ids = _enqueue_spread(
        harness,
        [
            NewJobSpec(WIRE, b"", queue="billing"),
            NewJobSpec(OTHER_WIRE, b"", queue="billing"),
            NewJobSpec(WIRE, b"", queue="emails"),
            NewJobSpec(OTHER_WIRE, b"", queue="emails"),
            NewJobSpec(WIRE, b"", queue="billing"),
        ],
    )
    harness.claim_one(ids[0])

    def listed(**filters: Any) -> list[str]:
        return [job_id for page in _all_pages(harness, 10, **filters) for job_id in page]

    assert listed(queue="billing") == [ids[4], ids[1], ids[0]]
    assert listed(wire_name=OTHER_WIRE) == [ids[3], ids[1]]
    assert listed(state=JobState.RESERVED) == [ids[0]]
    assert listed(queue="billing", wire_name=WIRE, state=JobState.AVAILABLE) == [ids[4]]
    assert listed(queue="nowhere") == []


@pytest.mark.parametrize("page_size", [1, 4, 7, 30])
def test_list_jobs_pages_cover_every_job_exactly_once(harness: Harness, page_size: int) -> None:
    ids = _enqueue_spread(harness, [NewJobSpec(WIRE if n % 3 else OTHER_WIRE, b"") for n in range(30)])

    pages = _all_pages(harness, page_size)

    assert [job_id for page in pages for job_id in page] == ids[::-1]
    assert all(len(page) == page_size for page in pages[:-1])
    assert 1 <= len(pages[-1]) <= page_size
    filtered = [job_id for page in _all_pages(harness, 4, wire_name=OTHER_WIRE) for job_id in page]
    assert filtered == ids[::3][::-1]


def test_list_jobs_paging_is_stable_while_jobs_are_added(harness: Harness) -> None:
    ids = _enqueue_spread(harness, [NewJobSpec(WIRE, b"") for _ in range(6)])
    first, token = harness.jobs.list_jobs(queue=None, state=None, wire_name=None, page_size=3, page_token="")
    _enqueue_spread(harness, [NewJobSpec(WIRE, b"")])  # newer than every page already handed out

    rest, end = harness.jobs.list_jobs(queue=None, state=None, wire_name=None, page_size=3, page_token=token)

    assert [j.id for j in first] + [j.id for j in rest] == ids[::-1]
    assert end == ""


def test_s5_page_size_is_clamped_to_max_page_size(harness: Harness) -> None:
    small = harness.with_bounds(max_page_size=4).with_config(default_page_size=3)
    ids = _enqueue_spread(small, [NewJobSpec(WIRE, b"") for _ in range(10)])

    clamped, token = small.jobs.list_jobs(
        queue=None, state=None, wire_name=None, page_size=500, page_token=""
    )
    default, _ = small.jobs.list_jobs(queue=None, state=None, wire_name=None, page_size=0, page_token="")

    assert [job.id for job in clamped] == ids[::-1][:4]
    following, _ = small.jobs.list_jobs(queue=None, state=None, wire_name=None, page_size=1, page_token=token)
    assert [job.id for job in following] == ids[::-1][4:5]  # the token continues after the clamped page
    assert [job.id for job in default] == ids[::-1][:3]
    assert [job_id for page in _all_pages(small, 1_000) for job_id in page] == ids[::-1]


def test_list_jobs_refuses_a_malformed_page_token(harness: Harness) -> None:
    with pytest.raises(InvalidArgument):
        harness.jobs.list_jobs(queue=None, state=None, wire_name=None, page_size=5, page_token="page-2")


def test_list_attempts_is_oldest_first(harness: Harness) -> None:
    job_id = harness.enqueue()
    first = harness.claim_one(job_id)
    harness.lapse(LEASE_MS)
    harness.clock.advance(harness.job(job_id).run_at_ms - harness.clock.now_ms())
    second = harness.run(job_id)
    harness.report(second.attempt_id, Outcome.RETRYABLE_FAILURE, error_code="E")
    harness.clock.advance(harness.job(job_id).run_at_ms - harness.clock.now_ms())
    third = harness.run(job_id)
    harness.report(third.attempt_id, output=b"ok")

    attempts = harness.jobs.list_attempts(job_id)

    assert [a.id for a in attempts] == [first.attempt_id, second.attempt_id, third.attempt_id]
    assert [a.outcome for a in attempts] == [
        Outcome.UNSTARTED_ABANDONED,
        Outcome.RETRYABLE_FAILURE,
        Outcome.SUCCEEDED,
    ]
    assert [a.execution_number for a in attempts] == [0, 1, 2]
    assert attempts[0].claimed_at_ms < attempts[1].claimed_at_ms < attempts[2].claimed_at_ms


def test_transitions_record_each_state_change_in_order(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.report(claimed.attempt_id, output=b"ok")

    history = harness.transitions(job_id)

    assert [(t["seq"], t["from_state"], t["to_state"], t["reason"]) for t in history] == [
        (1, None, "available", "enqueued"),
        (2, "available", "reserved", "claimed"),
        (3, "reserved", "running", "started"),
        (4, "running", "succeeded", "succeeded"),
    ]
    assert [t["attempt_id"] for t in history] == [None] + [claimed.attempt_id] * 3
    assert harness.job(job_id).history_seq == 4


def test_s5_transition_history_keeps_the_newest_100(harness: Harness) -> None:
    job_id = harness.enqueue()
    cycles = 60  # claim + release: two transitions each, 121 in all with the enqueue
    for _ in range(cycles):
        harness.release(harness.claim_one(job_id).attempt_id)
    total = 1 + 2 * cycles

    history = harness.transitions(job_id)

    assert HISTORY_LIMIT == 100
    assert len(history) == 100
    assert [t["seq"] for t in history] == list(range(total - 99, total + 1))
    assert (history[-1]["from_state"], history[-1]["to_state"]) == ("reserved", "available")
    assert harness.job(job_id).history_seq == total
    assert len(harness.attempts(job_id)) == cycles  # attempts are not trimmed with history


def test_reads_of_an_unreachable_database_are_unavailable_not_internal() -> None:
    """A database outage during a read is UNAVAILABLE (retry later), never INTERNAL."""
    from coordinator.config import CoordinatorConfig
    from coordinator.domain.clock import FakeClock
    from coordinator.errors import Unavailable
    from coordinator.service.jobs import JobsService
    from coordinator.store import Store, StoreError

    unreachable = Store("postgresql+psycopg://postgres@127.0.0.1:1/nowhere?connect_timeout=2")
    try:
        with pytest.raises(StoreError):
            unreachable.list_attempts("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")
        service = JobsService(unreachable, FakeClock(), CoordinatorConfig())
        with pytest.raises(Unavailable):
            service.get_job("0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f")
    finally:
        unreachable.close()


def test_r13_database_clock_samples_bracket_the_database_clock(harness: Harness) -> None:
    samples = harness.store.database_clock_samples(3)

    if not harness.store.postgres:
        assert samples == []  # SQLite: the host's clock is the only one
        return
    assert len(samples) == 3
    for sample in samples:
        assert sample.sent_ms <= sample.received_ms
        # One host: the database's clock agrees with ours within the round trip (plus
        # a millisecond of rounding), whatever the load.
        assert sample.sent_ms - 1 <= sample.remote_ms <= sample.received_ms + 1
