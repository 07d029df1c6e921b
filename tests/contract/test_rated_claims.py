"""A queue-wide rate that does not bind costs a claim little (issue 39): the enqueue's own
batch claims a rated queue's new job, as it does a free queue's, and on PostgreSQL the
claim reads the queue's jobs with its controls and the rate's counts in one statement.
Both engines; what a rate admits is unchanged (a start counted once, never missed)."""

from __future__ import annotations

import re

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.domain.records import NewJobSpec
from coordinator.service.queues import QueueService
from coordinator.service.work import ClaimRequest, EnqueueItem, WorkBatch

from .harness import LEASE_MS, OPERATOR, QUEUE, WIRE, WORKER, Harness, sent_statements

HOUR_MS = 3_600_000


def _rate(harness: Harness, count: int, period_ms: int = HOUR_MS, per_key: bool = False) -> None:
    queues = QueueService(harness.store, harness.clock, CoordinatorConfig())
    queues.set_rate(QUEUE, count, period_ms, per_key, OPERATOR)


def test_a_rated_queues_new_job_is_claimed_by_its_enqueues_own_batch(harness: Harness) -> None:
    harness.enqueue(queue=QUEUE)  # the queue exists before its rate is set
    harness.claim_one()
    _rate(harness, 1_000_000, period_ms=1_000)
    item = EnqueueItem([NewJobSpec(WIRE, b"{}", queue=QUEUE)])
    request = ClaimRequest(WORKER, (QUEUE,), (WIRE,), 8, LEASE_MS)

    answers = harness.ops.process(WorkBatch(enqueues=[item], claims=[request]))

    [enqueued] = answers.enqueued[0]  # type: ignore[misc]
    [claimed] = answers.claims[0]
    assert claimed.job.id == enqueued.job_id
    assert answers.drained == [True]  # nothing held back: the worker waits for news of work
    assert harness.start(claimed.attempt_id).granted


@pytest.mark.perf
def test_a_queue_wide_rates_claim_reads_jobs_with_controls_and_counts_in_one_statement(
    harness: Harness,
) -> None:
    """PostgreSQL: the controls with the jobs (one read), the queue's lock, the rate's
    counts with the prune (one statement). SQLite, whose statements cost no round trip,
    reads each on its own."""
    job_id = harness.enqueue(queue=QUEUE)
    _rate(harness, 1_000_000)
    with sent_statements() as sent:
        claimed = harness.claim(5)
    assert [c.job.id for c in claimed] == [job_id]
    job_reads = [sql for sql, _ in sent if re.search(r"ORDER BY jobs\.priority DESC", sql)]
    rate_statements = [sql for sql, _ in sent if "queue_rate_slots" in sql]
    assert len(job_reads) == 1, job_reads
    if harness.store.postgres:
        assert re.search(r"\bJOIN queues\b", job_reads[0]), job_reads
        assert len(rate_statements) == 1 and "DELETE" in rate_statements[0], rate_statements
    else:
        assert len(rate_statements) == 2, rate_statements


def test_a_start_between_two_claims_counts_once_against_the_rate(harness: Harness) -> None:
    """3 a window: two claimed, one of them started, then a claim takes the third only."""
    for _ in range(5):
        harness.enqueue(queue=QUEUE)
    _rate(harness, 3)
    first = harness.claim(2)
    assert len(first) == 2
    assert harness.start(first[0].attempt_id).granted
    assert len(harness.claim(5)) == 1
    assert harness.claim(5) == []


def test_a_per_key_rate_still_reads_its_jobs_after_its_keys_room(harness: Harness) -> None:
    """A per-key rate is kept job by job: its jobs are not read with the controls."""
    for key in ("a", "a", "b"):
        harness.enqueue(queue=QUEUE, concurrency_key=key)
    _rate(harness, 1, per_key=True)
    assert sorted(c.job.concurrency_key for c in harness.claim(5)) == ["a", "b"]
