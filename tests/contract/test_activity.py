"""The dashboard's activity reads on both engines: jobs that ended per minute (counted by
the count fold from the deltas it folds, so retries and purges count no end), and the
workers holding leases."""

from __future__ import annotations

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.activity import MINUTE_MS
from coordinator.domain.records import LeaseHolder
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument
from coordinator.service.activity import ActivityService
from coordinator.service.manage import ManagementService
from coordinator.service.queues import QueueService
from coordinator.store.tx_queues import FINISHED_MINUTES_KEPT_MS

from .harness import OPERATOR, Harness


def _services(harness: Harness) -> tuple[QueueService, ActivityService]:
    return (
        QueueService(harness.store, harness.clock, CoordinatorConfig()),
        ActivityService(harness.store, harness.clock),
    )


def _finish(harness: Harness, outcome: Outcome, queue: str = "q") -> str:
    claimed = harness.run(harness.enqueue(queue=queue), queues=(queue,))
    harness.report(claimed.attempt_id, outcome)
    return claimed.job.id


def test_ended_jobs_are_counted_per_minute_and_state_when_the_deltas_fold(harness: Harness) -> None:
    queues, activity = _services(harness)
    harness.clock.advance(MINUTE_MS - harness.clock.now_ms() % MINUTE_MS)  # a minute's start
    _finish(harness, Outcome.SUCCEEDED)
    _finish(harness, Outcome.SUCCEEDED, queue="other")
    _finish(harness, Outcome.PERMANENT_FAILURE)
    assert activity.throughput().ended == 0  # not folded yet: nothing counted

    queues.fold_counts()
    harness.clock.advance(MINUTE_MS)
    _finish(harness, Outcome.SUCCEEDED)
    queues.fold_counts()

    hour = activity.throughput()
    assert len(hour.minutes) == 60
    assert [(m.succeeded, m.failed) for m in hour.minutes[-2:]] == [(2, 1), (1, 0)]
    assert (hour.succeeded, hour.failed, hour.cancelled) == (3, 1, 0)
    assert hour.failure_rate == pytest.approx(0.25)
    assert activity.throughput(queue="other").succeeded == 1


def test_a_retry_and_a_purge_take_jobs_out_of_a_terminal_state_and_count_no_end(harness: Harness) -> None:
    queues, activity = _services(harness)
    manage = ManagementService(harness.store, harness.clock)
    failed = _finish(harness, Outcome.PERMANENT_FAILURE)
    _finish(harness, Outcome.SUCCEEDED)
    queues.fold_counts()

    manage.retry(failed, OPERATOR)
    harness.clock.advance(1)
    assert harness.store.transact(lambda tx: tx.purge(JobState.SUCCEEDED, harness.clock.now_ms(), 10)) == 1
    queues.fold_counts()

    hour = activity.throughput()
    assert (hour.succeeded, hour.failed) == (1, 1)


def test_minutes_older_than_a_day_are_dropped_and_a_window_is_bounded(harness: Harness) -> None:
    queues, activity = _services(harness)
    _finish(harness, Outcome.SUCCEEDED)
    queues.fold_counts()
    assert len(harness.store.finished_since(0)) == 1

    harness.clock.advance(FINISHED_MINUTES_KEPT_MS + 2 * MINUTE_MS)
    queues.fold_counts()

    assert harness.store.finished_since(0) == []
    assert activity.throughput(24 * 60 * MINUTE_MS).ended == 0
    for window in (0, MINUTE_MS - 1, 24 * 60 * MINUTE_MS + 1):
        with pytest.raises(InvalidArgument, match="window"):
            activity.throughput(window)


def test_lease_holders_are_the_workers_with_reserved_or_running_jobs(harness: Harness) -> None:
    _, activity = _services(harness)
    for _ in range(3):
        harness.enqueue()
    harness.run(worker_id="w-busy")
    harness.claim_one(worker_id="w-busy")
    done = harness.run(worker_id="w-done")
    harness.report(done.attempt_id, Outcome.SUCCEEDED)
    harness.claim_one(harness.enqueue(), worker_id="w-idle-soon")

    assert activity.lease_holders() == [
        LeaseHolder("w-busy", reserved=1, running=1),
        LeaseHolder("w-idle-soon", reserved=1, running=0),
    ]
    assert activity.lease_holders(limit=1) == [LeaseHolder("w-busy", reserved=1, running=1)]
    with pytest.raises(InvalidArgument, match="limit"):
        activity.lease_holders(limit=0)
