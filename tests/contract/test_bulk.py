"""Bulk cancel and retry by filter (``service.bulk``), against the store on both engines:
bounded batches, one audit event per job, the single operations' rules per job, only
jobs that existed when the operation began, and bad filters refused before any change."""

from __future__ import annotations

import pytest

from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument
from coordinator.service.bulk import (
    CANCELLABLE,
    RETRYABLE,
    BulkBatch,
    BulkOutcome,
    BulkService,
    JobFilter,
    check_filter,
)
from coordinator.service.manage import ManagementService

from .harness import SECOND, Harness
from .test_management import OPERATOR, events

BATCH = 3


@pytest.fixture
def small(harness: Harness) -> Harness:
    """Batches of three jobs, so every bulk run here takes several transactions."""
    return harness.with_bounds(max_page_size=BATCH)


@pytest.fixture
def bulk(small: Harness) -> BulkService:
    return BulkService(ManagementService(small.store, small.clock))


def run(bulk: BulkService, verb: str, job_filter: JobFilter, **kwargs: bool) -> tuple[BulkOutcome, int]:
    """The whole operation as the facade runs it; returns it and its batch count."""
    allowed = CANCELLABLE if verb == "cancel" else RETRYABLE
    states = check_filter(job_filter, allowed, verb, 128)
    created_by = bulk.manage.clock.now_ms()
    outcome, after, batches = BulkOutcome(), None, 0
    while True:
        batch: BulkBatch
        if verb == "cancel":
            batch = bulk.cancel_batch(job_filter, states, created_by, after, OPERATOR)
        else:
            batch = bulk.retry_batch(
                job_filter,
                states,
                created_by,
                after,
                OPERATOR,
                include_dependents=kwargs.get("deps", False),
                reopened=frozenset(outcome.reopened_ids),
            )
        assert batch.selected <= BATCH
        batches += 1
        outcome.add(batch)
        if batch.last_id is None:
            return outcome, batches
        after = batch.last_id


def test_bulk_cancel_works_in_bounded_batches_and_audits_every_job(small: Harness, bulk: BulkService) -> None:
    running = small.run(small.enqueue(queue="q")).job.id
    later = small.clock.now_ms() + 60 * SECOND
    queued = [small.enqueue(queue="q") for _ in range(4)] + [small.enqueue(queue="q", run_at_ms=later)]
    elsewhere = small.enqueue(queue="other")

    outcome, batches = run(bulk, "cancel", JobFilter(queue="q"))

    assert (outcome.done, outcome.requested, outcome.skipped) == (5, 1, 0)
    assert batches == 3  # 6 jobs in batches of 3, then one that finds none
    assert {small.job(j).state for j in queued} == {JobState.CANCELLED}
    assert small.job(running).state is JobState.RUNNING and small.job(running).cancel_requested
    assert small.job(elsewhere).state is JobState.AVAILABLE
    audited = [e for e in events(small) if e.action == "job.cancel"]
    assert sorted(e.target for e in audited) == sorted([*queued, running])
    assert all(e.actor_name == "ops" and "(bulk: queue q)" in (e.detail or "") for e in audited)


def test_bulk_retry_retries_each_job_as_a_single_retry_would(small: Harness, bulk: BulkService) -> None:
    parent = small.enqueue(queue="p")
    small.clock.advance(1)  # IDs in creation order: the parent comes first
    child = small.enqueue(queue="c", parent_ids=(parent,))
    failed = []
    for n in range(3):
        small.clock.advance(1)
        failed.append(small.enqueue(queue=f"f{n}"))
    for job_id in [parent, *failed]:
        small.report(small.run(job_id).attempt_id, Outcome.PERMANENT_FAILURE)
    assert small.job(child).state is JobState.FAILED  # parent_failed, without running

    alone, _ = run(bulk, "retry", JobFilter(queue="c"))  # as a single retry: refused
    assert (alone.done, alone.skipped) == (0, 1)
    [skipped] = alone.skipped_jobs
    assert (skipped.job_id, skipped.reason) == (child, "PARENT_NOT_SUCCEEDED")
    assert small.job(child).generation == 1

    everything, batches = run(bulk, "retry", JobFilter(state=JobState.FAILED))
    # In id order the parent is retried first, so its child may be retried after it.
    assert (everything.done, everything.skipped, batches) == (5, 0, 3)
    assert {small.job(j).state for j in [parent, *failed]} == {JobState.AVAILABLE}
    assert (small.job(child).state, small.job(child).generation) == (JobState.WAITING, 2)
    retries = [e for e in events(small) if e.action == "job.retry"]
    assert sorted(e.target for e in retries) == sorted([parent, child, *failed])


def test_bulk_retry_with_dependents_reopens_them_once(small: Harness, bulk: BulkService) -> None:
    parent = small.enqueue(queue="p")
    child = small.enqueue(queue="c", parent_ids=(parent,))
    small.report(small.run(parent).attempt_id, Outcome.PERMANENT_FAILURE)

    outcome, _ = run(bulk, "retry", JobFilter(queue="p"), deps=True)

    assert (outcome.done, outcome.reopened, outcome.skipped) == (1, 1, 0)
    assert small.job(parent).state is JobState.AVAILABLE
    assert (small.job(child).state, small.job(child).generation) == (JobState.WAITING, 2)


def test_bulk_retry_with_dependents_leaves_the_reopened_ones_be(small: Harness, bulk: BulkService) -> None:
    """``--state failed --include-dependents``: the children failed parent_failed match
    the filter too; re-opened with their parent, they are not retried again or skipped."""
    parent = small.enqueue(queue="p")
    children = []
    for _ in range(4):  # more than a batch: some are selected in later batches
        small.clock.advance(1)
        children.append(small.enqueue(queue="c", parent_ids=(parent,)))
    small.report(small.run(parent).attempt_id, Outcome.PERMANENT_FAILURE)

    outcome, _ = run(bulk, "retry", JobFilter(state=JobState.FAILED), deps=True)

    assert (outcome.done, outcome.reopened, outcome.skipped) == (1, 4, 0)
    assert {(small.job(c).state, small.job(c).generation) for c in children} == {(JobState.WAITING, 2)}


def test_jobs_created_after_the_operation_began_are_not_selected(small: Harness, bulk: BulkService) -> None:
    before = [small.enqueue() for _ in range(2)]
    states = check_filter(JobFilter(queue="default"), CANCELLABLE, "cancel", 128)
    began = small.clock.now_ms()
    small.clock.advance(SECOND)
    after = small.enqueue()

    batch = bulk.cancel_batch(JobFilter(queue="default"), states, began, None, OPERATOR)

    assert batch.done == 2 and {small.job(j).state for j in before} == {JobState.CANCELLED}
    assert small.job(after).state is JobState.AVAILABLE


@pytest.mark.parametrize(
    ("verb", "job_filter", "field"),
    [
        ("cancel", JobFilter(), "filter"),
        ("cancel", JobFilter(state=JobState.SUCCEEDED), "filter.state"),
        ("retry", JobFilter(state=JobState.AVAILABLE), "filter.state"),
        ("retry", JobFilter(queue="has spaces"), "filter.queue"),
    ],
    ids=["empty", "cancel-terminal", "retry-available", "bad-queue"],
)
def test_a_bad_filter_is_refused_before_anything_changes(
    small: Harness, verb: str, job_filter: JobFilter, field: str
) -> None:
    job_id = small.enqueue()
    before = small.snapshot(job_id)
    with pytest.raises(InvalidArgument) as refused:
        check_filter(job_filter, CANCELLABLE if verb == "cancel" else RETRYABLE, verb, 128)
    assert refused.value.field == field
    assert small.snapshot(job_id) == before and events(small) == []
