"""Only the stream that holds a claim may act on its attempt: the worker ID and token
that claimed it, with the job inside the token's queues. A start, heartbeat, result or
release from anyone else is refused and changes nothing; and a start repeated after
the attempt ended is refused, not answered from the first grant."""

from __future__ import annotations

import pytest

from coordinator.domain.records import WorkerIdentity
from coordinator.domain.states import JobState, Outcome
from coordinator.service.work import AttemptMessage, WorkBatch

from .harness import LEASE_MS, Harness

HOLDER = WorkerIdentity("worker-1", "0123456789abcdef")
OTHERS = [
    pytest.param(WorkerIdentity("worker-2", "0123456789abcdef"), id="another-worker-same-token"),
    pytest.param(WorkerIdentity("worker-1", "fedcba9876543210"), id="same-worker-id-another-token"),
    pytest.param(WorkerIdentity("worker-1", None), id="same-worker-id-no-token"),
    # The job is in queue "default": a token limited to "qa" may not touch it.
    pytest.param(
        WorkerIdentity("worker-1", "0123456789abcdef", frozenset({"qa"})), id="token-limited-to-another-queue"
    ),
]


def _claim(harness: Harness) -> str:
    job_id = harness.enqueue()
    [claimed] = harness.claim(1, worker_id=HOLDER.worker_id, token_id=HOLDER.token_id)
    assert claimed.job.id == job_id
    return claimed.attempt_id


@pytest.mark.parametrize("other", OTHERS)
def test_another_stream_cannot_start_a_claim(harness: Harness, other: WorkerIdentity) -> None:
    attempt_id = _claim(harness)
    before = harness.rows()

    answer = harness.start(attempt_id, sender=other)

    assert (answer.granted, answer.reason) == (False, "attempt held by another worker")
    assert harness.rows() == before
    assert harness.start(attempt_id, sender=HOLDER).granted


@pytest.mark.parametrize("other", OTHERS)
def test_another_stream_cannot_heartbeat_report_or_release_a_running_attempt(
    harness: Harness, other: WorkerIdentity
) -> None:
    attempt_id = _claim(harness)
    assert harness.start(attempt_id, sender=HOLDER).granted
    harness.clock.advance(1_000)
    before = harness.rows()

    lost, _ = harness.heartbeat([attempt_id], LEASE_MS * 10, sender=other)
    forged = harness.report(attempt_id, Outcome.SUCCEEDED, output=b"forged", sender=other)
    harness.ops.process(_release(attempt_id, other))

    assert lost == {attempt_id}
    assert not forged.accepted and forged.error is not None
    assert forged.error.reason == "ATTEMPT_NOT_HELD"
    assert harness.rows() == before  # the lease was not renewed, nothing was written

    real = harness.report(attempt_id, Outcome.SUCCEEDED, output=b"real", sender=HOLDER)
    assert real.accepted and real.job_state is JobState.SUCCEEDED
    assert harness.job(_job_of(harness, attempt_id)).output == b"real"


def test_the_holder_on_a_new_stream_keeps_its_claim(harness: Harness) -> None:
    """A worker that reconnects (same worker ID and token, perhaps to another replica)
    still heartbeats and reports its runs."""
    attempt_id = _claim(harness)
    assert harness.start(attempt_id, sender=HOLDER).granted
    lost, _ = harness.heartbeat([attempt_id], sender=WorkerIdentity(HOLDER.worker_id, HOLDER.token_id))
    assert lost == set()
    assert harness.report(attempt_id, sender=WorkerIdentity(HOLDER.worker_id, HOLDER.token_id)).accepted


def test_a_start_repeated_after_its_lease_lapsed_is_refused(harness: Harness) -> None:
    attempt_id = _claim(harness)
    first = harness.start(attempt_id, sender=HOLDER)
    assert first.granted
    assert harness.start(attempt_id, sender=HOLDER).granted  # a repeat while it runs: the first answer

    harness.lapse(LEASE_MS)  # the worker went silent: the attempt ends abandoned, the job retries
    [attempt] = harness.store.list_attempts(_job_of(harness, attempt_id))
    assert attempt.outcome is Outcome.ABANDONED
    before = harness.rows()

    repeat = harness.start(attempt_id, sender=HOLDER)

    assert (repeat.granted, repeat.reason) == (False, "attempt already ended")
    assert harness.rows() == before


def _release(attempt_id: str, sender: WorkerIdentity) -> WorkBatch:
    return WorkBatch(releases=[AttemptMessage(attempt_id, sender)])


def _job_of(harness: Harness, attempt_id: str) -> str:
    attempt = harness.store.get_attempt(attempt_id)
    assert attempt is not None
    return attempt.job_id


def test_a_start_asked_after_the_lease_lapsed_is_refused_before_the_expiry_pass(harness: Harness) -> None:
    """The claim's lease ran out (the worker paused past it); until the expiry pass ends
    the attempt, a start must not be granted: the job would be charged for a run its
    worker will not make, and may run elsewhere once recovered."""
    attempt_id = _claim(harness)
    harness.clock.advance(LEASE_MS)
    before = harness.rows()

    answer = harness.start(attempt_id, sender=HOLDER)

    assert (answer.granted, answer.reason) == (False, "lease lapsed")
    assert harness.rows() == before
    harness.lapse(0)
    [attempt] = harness.store.list_attempts(_job_of(harness, attempt_id))
    assert attempt.outcome is Outcome.UNSTARTED_ABANDONED
