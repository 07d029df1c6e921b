"""When a table has outgrown the planner's estimate (``store.planner.outgrown``)."""

from __future__ import annotations

import pytest

from coordinator.store import planner


@pytest.mark.parametrize(
    ("known", "estimated", "stale"),
    [
        (0, 0, False),
        (planner.OUTGROWN_MIN_ROWS - 1, 0, False),  # small tables are planned cheaply anyway
        (planner.OUTGROWN_MIN_ROWS, 0, True),
        (10_000, 5_000, False),  # not more than twice the estimate
        (10_001, 5_000, True),
        (3_000, 1_400, True),
        (2_500, 1_400, False),  # not 1,000 more
    ],
)
def test_outgrown_needs_twice_the_estimate_and_a_thousand_more(
    known: int, estimated: int, stale: bool
) -> None:
    assert planner.outgrown(known, estimated) is stale
