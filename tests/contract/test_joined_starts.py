"""An enqueue's batch whose claims go out before the commit writes the starts that come
back in time in the same transaction (``WorkBatch.joining``, ``dispatch.joined_starts``),
on both engines: the job is running once that one transaction commits, each start is
checked as any start is (R-1: only the holder's, only once), and a transaction run again
hands nothing out and refuses the starts its first try took (their attempts never
existed).

The worker's side is played by ``ScriptedJoin``: it answers each claim handed out with a
start from the claiming stream (or from ``sender``), as a worker would."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.states import JobState
from coordinator.service.work import (
    AttemptMessage,
    BatchAnswers,
    Claimed,
    ClaimRequest,
    EnqueueItem,
    WorkBatch,
)
from coordinator.store import WriteConflict

from .harness import LEASE_MS, OTHER_WIRE, QUEUE, WIRE, WORKER, Harness


class ScriptedJoin:
    """A ``StartJoin`` whose worker answers every claim at once with its start."""

    def __init__(
        self, *, answer: bool = True, sender: WorkerIdentity | None = None, conflicts: int = 0
    ) -> None:
        self.answer = answer
        self.sender = sender
        self.conflicts = conflicts
        """How many gathers fail the transaction (a guarded write that conflicted)."""
        self.handed: list[list[str]] = []
        self.taken: list[AttemptMessage] = []

    def hand_out(self, claims: Sequence[Sequence[Claimed]]) -> bool:
        if self.handed:
            return False  # a second try: its claims go out after the commit
        self.handed = [[c.attempt_id for c in found] for found in claims]
        if self.answer:
            sender = self.sender or WorkerIdentity(WORKER)
            self.taken = [AttemptMessage(c.attempt_id, sender) for found in claims for c in found]
        return True

    def gather(self) -> list[AttemptMessage]:
        if self.conflicts:
            self.conflicts -= 1
            raise WriteConflict("a job changed meanwhile")
        return list(self.taken)


def _enqueue_joining(harness: Harness, join: ScriptedJoin, count: int = 1) -> tuple[list[str], BatchAnswers]:
    specs = [NewJobSpec(WIRE, b"{}", queue=QUEUE) for _ in range(count)]
    request = ClaimRequest(WORKER, (QUEUE,), (WIRE, OTHER_WIRE), count, LEASE_MS)
    batch = WorkBatch(enqueues=[EnqueueItem(specs)], claims=[request], joining=join)
    answers = harness.ops.process(batch)
    [outcome] = answers.enqueued
    assert not isinstance(outcome, Exception), outcome
    return [item.job_id for item in outcome], answers


def test_the_starts_that_come_in_time_are_written_in_the_claims_transaction(harness: Harness) -> None:
    join = ScriptedJoin()
    job_ids, answers = _enqueue_joining(harness, join, count=2)
    assert answers.handed_out_early
    claimed = [c.attempt_id for c in answers.claims[0]]
    assert join.handed == [claimed]
    assert [(a.attempt_id, a.granted, a.execution_number) for a in answers.joined_starts] == [
        (attempt_id, True, 1) for attempt_id in claimed
    ]
    assert sorted(c.job.id for c in answers.claims[0]) == sorted(job_ids)
    for job_id, attempt_id in [(c.job.id, c.attempt_id) for c in answers.claims[0]]:
        job = harness.job(job_id)
        assert (job.state, job.current_attempt_id, job.executions) == (JobState.RUNNING, attempt_id, 1)
        [attempt] = harness.attempts(job_id)
        assert attempt.started_at_ms is not None and attempt.execution_number == 1
        # the worker's start sent again is answered as the first was, and changes nothing.
        again = harness.start(attempt_id)
        assert (again.granted, again.execution_number) == (True, 1)
        assert harness.job(job_id).executions == 1


def test_a_claim_whose_start_did_not_come_stays_reserved_until_its_start(harness: Harness) -> None:
    (job_id,), answers = _enqueue_joining(harness, ScriptedJoin(answer=False))
    assert answers.handed_out_early and answers.joined_starts == []
    [claimed] = answers.claims[0]
    job = harness.job(job_id)
    assert (job.state, job.executions) == (JobState.RESERVED, 0)
    answer = harness.start(claimed.attempt_id)  # the start came after the commit
    assert (answer.granted, answer.execution_number) == (True, 1)
    assert harness.job(job_id).state is JobState.RUNNING


def test_a_joined_start_from_another_stream_is_refused(harness: Harness) -> None:
    (job_id,), answers = _enqueue_joining(harness, ScriptedJoin(sender=WorkerIdentity("intruder")))
    [answer] = answers.joined_starts
    assert not answer.granted and answer.reason == "attempt held by another worker"
    job = harness.job(job_id)
    assert (job.state, job.executions) == (JobState.RESERVED, 0)


def test_a_try_run_again_hands_nothing_out_and_refuses_the_first_tries_starts(harness: Harness) -> None:
    join = ScriptedJoin(conflicts=1)
    (job_id,), answers = _enqueue_joining(harness, join)
    [[first_try_attempt]] = join.handed
    # The second try's claim goes out after the commit; the start the first try took
    # names an attempt that was rolled back.
    assert not answers.handed_out_early
    [claimed] = answers.claims[0]
    assert claimed.attempt_id != first_try_attempt
    [refused] = answers.joined_starts
    assert (refused.attempt_id, refused.granted) == (first_try_attempt, False)
    assert refused.reason == "unknown attempt"
    job = harness.job(job_id)
    assert (job.state, job.current_attempt_id, job.executions) == (JobState.RESERVED, claimed.attempt_id, 0)
    assert [a.id for a in harness.attempts(job_id)] == [claimed.attempt_id]
