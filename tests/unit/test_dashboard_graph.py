"""The job page's attempt timeline: every attempt on one axis from the first claim to the
last thing known, in thousandths, independent of the clock."""

from __future__ import annotations

from coordinator.domain.graph import timeline
from coordinator.domain.records import AttemptRecord


def _attempt(n: int, claimed: int, started: int | None, finished: int | None) -> AttemptRecord:
    return AttemptRecord(
        id=f"a{n}",
        job_id="j",
        generation=1,
        worker_id="w",
        execution_number=n,
        claimed_at_ms=claimed,
        started_at_ms=started,
        finished_at_ms=finished,
        outcome=None,
        error_code=None,
        exception_type=None,
        message=None,
        detail=None,
        retry_delay_ms=None,
        job_state_after=None,
        reported=False,
    )


def test_bars_share_one_axis_from_the_first_claim_to_the_last_end() -> None:
    bars, first, last = timeline([_attempt(1, 1_000, 1_100, 1_500), _attempt(2, 2_000, 2_500, 3_000)])
    assert (first, last) == (1_000, 3_000)
    assert [(b.start, b.wait, b.run) for b in bars] == [(0, 50, 200), (500, 250, 250)]


def test_an_open_attempt_reaches_the_axis_end_and_a_never_started_one_only_waits() -> None:
    bars, _, last = timeline([_attempt(1, 0, None, 400), _attempt(2, 500, 600, None)])
    assert last == 1_600  # the last thing known, and a second's room for the open one
    assert [(b.start, b.wait, b.run) for b in bars] == [(0, 250, 0), (312, 63, 625)]
    assert timeline([]) == ([], 0, 0)
