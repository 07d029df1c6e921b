"""A claim says its queues are drained (``BatchAnswers.drained``: its worker then waits to
hear of new work rather than claim after every result) when it took every claimable job
it could see: for a limited or rated queue too, as long as no limit or rate held a job
back. Both engines."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.records import NewJobSpec
from coordinator.service.queues import QueueService
from coordinator.service.work import ClaimRequest, WorkBatch

from .harness import LEASE_MS, OPERATOR, WIRE, Harness

HOUR_MS = 3_600_000
Control = Callable[[QueueService], object]


@pytest.mark.parametrize(
    ("control", "jobs", "claimed", "drained"),
    [
        (lambda q: q.set_rate("q", 1_000_000, HOUR_MS, False, OPERATOR), 3, 3, True),
        (lambda q: q.set_rate("q", 2, HOUR_MS, False, OPERATOR), 5, 2, False),
        (lambda q: q.set_rate("q", 1, HOUR_MS, True, OPERATOR), 3, 1, False),
        (lambda q: q.set_limit("q", 10, OPERATOR), 3, 3, True),
        (lambda q: q.set_limit("q", 2, OPERATOR), 5, 2, False),
        (lambda q: q.set_key_limit("q", 1, OPERATOR), 3, 1, False),
    ],
    ids=[
        "rate-roomy",
        "rate-binding",
        "key-rate-binding",
        "limit-roomy",
        "limit-binding",
        "key-limit-binding",
    ],
)
def test_a_limited_queue_is_drained_only_when_nothing_was_held_back(
    harness: Harness, control: Control, jobs: int, claimed: int, drained: bool
) -> None:
    harness.enqueue_specs([NewJobSpec(WIRE, b"{}", queue="q") for _ in range(jobs)])
    control(QueueService(harness.store, harness.clock, CoordinatorConfig()))

    request = ClaimRequest("w1", ("q",), (WIRE,), 10, LEASE_MS)
    answers = harness.ops.process(WorkBatch(claims=[request]))

    assert (len(answers.claims[0]), answers.drained[0]) == (claimed, drained)
