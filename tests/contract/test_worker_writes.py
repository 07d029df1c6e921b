"""Worker writes: starts (R-1, R-14), heartbeats (R-10), results (R-2, R-5, R-6, R-14,
R-16) and fencing of superseded attempts (R-11)."""

from __future__ import annotations

import pytest

from coordinator.domain.ids import uuid7
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import WorkerIdentity
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState, Outcome
from coordinator.scheduler.leases import expire_leases
from coordinator.service.work import AttemptMessage, ClaimRequest, HeartbeatRequest, ResultReport, WorkBatch
from worker_sdk.grammar import TRUNCATION_MARKER

from .harness import LEASE_MS, QUEUE, SECOND, WIRE, WORKER, Harness, r2_range

UNKNOWN_ATTEMPT = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"


WORKER_IDENTITY = WorkerIdentity(WORKER)


def _superseded(harness: Harness, job_id: str) -> tuple[str, str]:
    """Claims ``job_id`` as attempt A, lets its lease lapse unstarted, re-claims it as B."""
    first = harness.claim_one(job_id)
    harness.lapse(LEASE_MS)
    harness.clock.advance(harness.job(job_id).run_at_ms - harness.clock.now_ms())
    second = harness.claim_one(job_id)
    return first.attempt_id, second.attempt_id


def _superseded_after_start(harness: Harness, job_id: str) -> tuple[str, str]:
    """Runs ``job_id`` as attempt A, lets its lease lapse, re-claims it as B."""
    first = harness.run(job_id)
    harness.lapse(LEASE_MS)
    harness.clock.advance(harness.job(job_id).run_at_ms - harness.clock.now_ms())
    second = harness.claim_one(job_id)
    return first.attempt_id, second.attempt_id


# -- starts (R-1, R-14, R-11) -------------------------------------------------------------


def test_r1_a_granted_start_charges_one_execution(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    harness.clock.advance(2 * SECOND)
    now = harness.clock.now_ms()

    answer = harness.start(claimed.attempt_id)

    assert (answer.granted, answer.execution_number) == (True, 1)
    job = harness.job(job_id)
    assert (job.state, job.executions, job.unstarted_streak) == (JobState.RUNNING, 1, 0)
    assert job.current_attempt_id == claimed.attempt_id
    assert job.lease_expires_at_ms == claimed.lease_expires_at_ms  # a start does not renew
    [attempt] = harness.attempts(job_id)
    assert (attempt.started_at_ms, attempt.execution_number, attempt.outcome) == (now, 1, None)
    last = harness.transitions(job_id)[-1]
    assert (last["from_state"], last["to_state"], last["reason"]) == ("reserved", "running", "started")
    assert last["attempt_id"] == claimed.attempt_id


def test_r1_the_execution_number_counts_started_runs(harness: Harness) -> None:
    job_id = harness.enqueue()
    for expected in (1, 2, 3):
        claimed = harness.claim_one(job_id)
        answer = harness.start(claimed.attempt_id)
        assert answer.execution_number == expected
        assert harness.job(job_id).executions == expected
        harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE)
        harness.clock.advance(harness.job(job_id).run_at_ms - harness.clock.now_ms())
    assert harness.job(job_id).state is JobState.FAILED


def test_r14_a_repeated_start_returns_the_first_answer_without_charging(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    first = harness.start(claimed.attempt_id)
    before = harness.snapshot(job_id)
    harness.clock.advance(SECOND)

    again = harness.start(claimed.attempt_id)

    assert again == first
    assert harness.snapshot(job_id) == before
    assert harness.job(job_id).executions == 1


def test_r14_a_start_repeated_inside_one_batch_charges_once(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)

    answers = harness.ops.process(
        WorkBatch(starts=[AttemptMessage(claimed.attempt_id, harness.holder(claimed.attempt_id))] * 2)
    ).starts

    assert [(a.granted, a.execution_number) for a in answers] == [(True, 1), (True, 1)]
    assert harness.job(job_id).executions == 1
    assert [t["reason"] for t in harness.transitions(job_id)].count("started") == 1


def test_r11_a_start_for_an_unknown_attempt_is_refused(harness: Harness) -> None:
    job_id = harness.enqueue()
    harness.claim_one(job_id)
    before = harness.snapshot(job_id)

    answer = harness.start(UNKNOWN_ATTEMPT)

    assert answer.granted is False
    assert answer.reason
    assert harness.snapshot(job_id) == before


def test_r11_a_start_for_a_superseded_attempt_is_refused(harness: Harness) -> None:
    job_id = harness.enqueue()
    old, current = _superseded(harness, job_id)
    before = harness.snapshot(job_id)

    answer = harness.start(old)

    assert (answer.granted, answer.execution_number) == (False, 0)
    assert harness.snapshot(job_id) == before
    job = harness.job(job_id)
    assert (job.state, job.current_attempt_id, job.executions) == (JobState.RESERVED, current, 0)
    assert harness.start(current).granted is True


def test_r11_a_start_after_the_lease_was_recovered_is_refused(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    harness.lapse(LEASE_MS)
    before = harness.snapshot(job_id)

    assert harness.start(claimed.attempt_id).granted is False
    assert harness.snapshot(job_id) == before
    assert harness.job(job_id).executions == 0


# -- heartbeats (R-10) ----------------------------------------------------------------------


def test_r10_a_heartbeat_renews_the_lease_from_now(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.clock.advance(40 * SECOND)
    now = harness.clock.now_ms()

    lost, lease_until = harness.heartbeat([claimed.attempt_id], lease_ms=90 * SECOND)

    assert lost == set()
    assert lease_until == now + 90 * SECOND
    assert harness.job(job_id).lease_expires_at_ms == now + 90 * SECOND
    # Past the claim's lease, within the renewed one: expiry leaves the job alone.
    harness.clock.advance(89 * SECOND)
    expire_leases(harness.ops)
    job = harness.job(job_id)
    assert (job.state, job.current_attempt_id) == (JobState.RUNNING, claimed.attempt_id)


def test_r10_a_heartbeat_renews_several_attempts_and_reports_the_lost_ones(harness: Harness) -> None:
    reserved_id, running_id, superseded_id, finished_id = (harness.enqueue(queue=f"q{n}") for n in range(4))
    old, current = _superseded(harness, superseded_id)  # lets every lease held so far lapse
    superseded_lease = harness.job(superseded_id).lease_expires_at_ms
    reserved = harness.claim_one(reserved_id)
    running = harness.run(running_id)
    finished = harness.run(finished_id)
    harness.report(finished.attempt_id)
    harness.clock.advance(SECOND)
    now = harness.clock.now_ms()

    attempts = [reserved.attempt_id, running.attempt_id, old, finished.attempt_id, UNKNOWN_ATTEMPT]
    lost, _ = harness.heartbeat(attempts, lease_ms=30 * SECOND)

    assert lost == {old, finished.attempt_id, UNKNOWN_ATTEMPT}
    assert harness.job(reserved_id).lease_expires_at_ms == now + 30 * SECOND
    assert harness.job(running_id).lease_expires_at_ms == now + 30 * SECOND
    job = harness.job(superseded_id)
    assert (job.current_attempt_id, job.lease_expires_at_ms) == (current, superseded_lease)
    assert harness.job(finished_id).lease_expires_at_ms is None
    assert harness.job(finished_id).state is JobState.SUCCEEDED


def test_r10_each_heartbeat_of_a_batch_gets_its_own_answer(harness: Harness) -> None:
    a, b = harness.run(harness.enqueue()), harness.run(harness.enqueue())
    now = harness.clock.now_ms()

    answers = harness.ops.process(
        WorkBatch(
            heartbeats=[
                HeartbeatRequest([a.attempt_id, UNKNOWN_ATTEMPT], 10 * SECOND, harness.holder(a.attempt_id)),
                HeartbeatRequest([b.attempt_id], 20 * SECOND, harness.holder(b.attempt_id)),
            ]
        )
    )

    assert answers.lost == [{UNKNOWN_ATTEMPT}, set()]
    assert answers.lease_expires_at_ms == [now + 10 * SECOND, now + 20 * SECOND]
    assert harness.job(a.job.id).lease_expires_at_ms == now + 10 * SECOND
    assert harness.job(b.job.id).lease_expires_at_ms == now + 20 * SECOND


# -- results (R-5, R-2, R-6, R-16) ----------------------------------------------------------


def test_r16_success_stores_the_output_and_ends_succeeded(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    harness.clock.advance(3 * SECOND)
    now = harness.clock.now_ms()

    answer = harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=b"receipt-42")

    assert (answer.accepted, answer.job_state, answer.retry_delay_ms) == (True, JobState.SUCCEEDED, None)
    job = harness.job(job_id)
    assert (job.state, job.output, job.finished_at_ms, job.executions) == (
        JobState.SUCCEEDED,
        b"receipt-42",
        now,
        1,
    )
    assert (job.current_attempt_id, job.worker_id, job.lease_expires_at_ms) == (None, None, None)
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.finished_at_ms, attempt.job_state_after) == (
        Outcome.SUCCEEDED,
        now,
        JobState.SUCCEEDED,
    )
    assert (attempt.error_code, attempt.retry_delay_ms, attempt.reported) == (None, None, True)
    assert harness.transitions(job_id)[-1]["to_state"] == "succeeded"
    assert harness.claim(5) == []


def test_r5_retryable_failure_schedules_a_retry_within_the_r2_range(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    now = harness.clock.now_ms()

    answer = harness.report(
        claimed.attempt_id,
        Outcome.RETRYABLE_FAILURE,
        error_code="CardDeclined",
        exception_type="payments.CardDeclined",
        message="card declined",
        detail="Traceback ...",
        output=b"not kept",
    )

    low, high = r2_range(1, 5 * SECOND, 60 * SECOND)
    assert answer.accepted is True and answer.job_state is JobState.SCHEDULED
    delay = answer.retry_delay_ms
    assert delay is not None and low <= delay <= high
    job = harness.job(job_id)
    assert (job.state, job.run_at_ms, job.executions) == (JobState.SCHEDULED, now + delay, 1)
    assert (job.last_error_code, job.output, job.finished_at_ms, job.current_attempt_id) == (
        "CardDeclined",
        None,
        None,
        None,
    )
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.error_code, attempt.exception_type) == (
        Outcome.RETRYABLE_FAILURE,
        "CardDeclined",
        "payments.CardDeclined",
    )
    assert (attempt.message, attempt.detail) == ("card declined", "Traceback ...")
    assert (attempt.retry_delay_ms, attempt.job_state_after) == (delay, JobState.SCHEDULED)
    # Not claimable before the delay has passed; claimable once it has.
    harness.clock.advance(delay - 1)
    assert harness.claim(5) == []
    harness.clock.advance(1)
    assert harness.claim_one(job_id).job.executions == 1


def test_r2_later_retries_double_the_nominal_delay(harness: Harness) -> None:
    job_id = harness.enqueue(settings=SettingsLayer(max_executions=5))
    for run in (1, 2, 3, 4):
        claimed = harness.run(job_id)
        answer = harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE)
        low, high = r2_range(run, 5 * SECOND, 60 * SECOND)
        assert answer.retry_delay_ms is not None and low <= answer.retry_delay_ms <= high, run
        assert harness.attempts(job_id)[-1].retry_delay_ms == answer.retry_delay_ms
        harness.clock.advance(answer.retry_delay_ms)


def test_r1_failure_of_the_last_execution_ends_failed(harness: Harness) -> None:
    job_id = harness.enqueue(settings=SettingsLayer(max_executions=2))
    first = harness.run(job_id)
    delay = harness.report(first.attempt_id, Outcome.RETRYABLE_FAILURE).retry_delay_ms
    assert delay is not None
    harness.clock.advance(delay)
    last = harness.run(job_id)
    now = harness.clock.now_ms()

    answer = harness.report(last.attempt_id, Outcome.TIMED_OUT)

    assert (answer.accepted, answer.job_state, answer.retry_delay_ms) == (True, JobState.FAILED, None)
    job = harness.job(job_id)
    assert (job.state, job.executions, job.last_error_code, job.finished_at_ms) == (
        JobState.FAILED,
        2,
        "timeout",
        now,
    )
    outcomes = [(a.outcome, a.execution_number, a.job_state_after) for a in harness.attempts(job_id)]
    assert outcomes == [
        (Outcome.RETRYABLE_FAILURE, 1, JobState.SCHEDULED),
        (Outcome.TIMED_OUT, 2, JobState.FAILED),
    ]
    assert harness.claim(5) == []


def test_r5_permanent_failure_ends_failed_at_once(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)

    answer = harness.report(claimed.attempt_id, Outcome.PERMANENT_FAILURE, error_code="card_stolen")

    assert (answer.job_state, answer.retry_delay_ms) == (JobState.FAILED, None)
    job = harness.job(job_id)
    assert (job.state, job.executions, job.last_error_code) == (JobState.FAILED, 1, "card_stolen")
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.error_code) == (Outcome.PERMANENT_FAILURE, "card_stolen")


@pytest.mark.parametrize(
    ("outcome", "state", "code"),
    [
        (Outcome.TIMED_OUT, JobState.SCHEDULED, "timeout"),
        (Outcome.INTERRUPTED, JobState.SCHEDULED, "worker_shutdown"),
        (Outcome.CANCELLED, JobState.CANCELLED, "cancelled"),
    ],
)
def test_r5_outcomes_without_a_code_get_their_default_code(
    harness: Harness, outcome: Outcome, state: JobState, code: str
) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)

    assert harness.report(claimed.attempt_id, outcome).job_state is state

    job = harness.job(job_id)
    assert (job.state, job.last_error_code) == (state, code)
    assert harness.attempts(job_id)[0].error_code == code


def test_r6_explicit_retry_delay_is_used_as_given_and_capped_at_the_max(harness: Harness) -> None:
    capped_id = harness.enqueue(queue="capped", settings=SettingsLayer(retry_max_delay_ms=10 * SECOND))
    exact_id = harness.enqueue(queue="exact", settings=SettingsLayer(retry_max_delay_ms=10 * SECOND))
    capped, exact = harness.run(capped_id), harness.run(exact_id)
    now = harness.clock.now_ms()

    over = harness.report(
        capped.attempt_id, Outcome.RETRYABLE_FAILURE, explicit_retry_delay_ms=3_600 * SECOND
    )
    given = harness.report(exact.attempt_id, Outcome.RETRYABLE_FAILURE, explicit_retry_delay_ms=1_234)

    assert (over.job_state, over.retry_delay_ms) == (JobState.SCHEDULED, 10 * SECOND)
    assert harness.job(capped_id).run_at_ms == now + 10 * SECOND
    assert harness.attempts(capped_id)[0].retry_delay_ms == 10 * SECOND
    assert (given.job_state, given.retry_delay_ms) == (JobState.SCHEDULED, 1_234)  # no jitter
    assert harness.job(exact_id).run_at_ms == now + 1_234


def test_r6_a_negative_retry_delay_fails_the_job(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)

    answer = harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE, explicit_retry_delay_ms=-1)

    assert (answer.accepted, answer.job_state, answer.retry_delay_ms) == (True, JobState.FAILED, None)
    job = harness.job(job_id)
    assert (job.state, job.last_error_code, job.executions) == (JobState.FAILED, "negative_retry_delay", 1)
    [attempt] = harness.attempts(job_id)
    assert (attempt.outcome, attempt.error_code) == (Outcome.PERMANENT_FAILURE, "negative_retry_delay")


def test_s5_failure_text_is_truncated_before_it_is_stored(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    cap = harness.config.max_failure_detail_bytes

    harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE, message="é" * 1_000, detail="€" * cap)

    [attempt] = harness.attempts(job_id)
    assert attempt.message is not None and attempt.detail is not None
    assert attempt.message == "é" * 512  # 1,024 bytes, no code point split
    assert len(attempt.detail.encode()) <= cap
    assert attempt.detail.endswith(TRUNCATION_MARKER)


def test_text_with_nul_characters_is_stored_alike_on_both_engines(harness: Harness) -> None:
    """A NUL in a worker's exception text must not fail the batch (PostgreSQL text cannot
    hold it) nor the other workers' messages in it."""
    job_id, other_id = harness.enqueue(queue="failing"), harness.enqueue()
    claimed = harness.run(job_id)
    report = Report(
        Outcome.RETRYABLE_FAILURE,
        exception_type="Bad\x00Type",
        message="bad byte \x00 here",
        detail="line\x00",
    )
    claim = ClaimRequest("worker-2", (QUEUE,), (WIRE,), 1, LEASE_MS)

    answers = harness.ops.process(
        WorkBatch(
            results=[ResultReport(claimed.attempt_id, report, sender=harness.holder(claimed.attempt_id))],
            claims=[claim],
        )
    )

    assert answers.results[0].accepted is True
    assert [c.job.id for c in answers.claims[0]] == [other_id]
    [attempt] = harness.attempts(job_id)
    assert attempt.outcome is Outcome.RETRYABLE_FAILURE
    for text in (attempt.exception_type, attempt.message, attempt.detail):
        assert text is not None and "\x00" not in text
    assert attempt.message == "bad byte \ufffd here"


def test_r5_an_unknown_attempts_result_is_refused(harness: Harness) -> None:
    job_id = harness.enqueue()
    harness.run(job_id)
    before = harness.snapshot(job_id)

    answer = harness.report(uuid7(harness.clock.now_ms()))

    assert answer.accepted is False and answer.job_state is None
    assert harness.snapshot(job_id) == before


def test_r11_a_result_for_an_unstarted_claim_is_refused(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    before = harness.snapshot(job_id)

    assert harness.report(claimed.attempt_id).accepted is False
    assert harness.snapshot(job_id) == before


# -- repeated results -------------------------------------------------------------------


@pytest.mark.parametrize("outcome", [Outcome.RETRYABLE_FAILURE, Outcome.SUCCEEDED, Outcome.PERMANENT_FAILURE])
def test_r14_a_repeated_result_returns_the_first_answer_and_changes_nothing(
    harness: Harness, outcome: Outcome
) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    first = harness.report(claimed.attempt_id, outcome, error_code="E", output=b"out")
    before = harness.snapshot(job_id)
    harness.clock.advance(SECOND)

    again = harness.report(claimed.attempt_id, outcome, error_code="Other", output=b"changed")

    assert again == first
    assert again.accepted is True
    assert harness.snapshot(job_id) == before


def test_r14_a_repeated_retryable_result_keeps_the_chosen_delay(harness: Harness) -> None:
    """R-2: the stored delay is reused; a second random draw would move the retry."""
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    first = harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE)
    run_at = harness.job(job_id).run_at_ms

    answers = [harness.report(claimed.attempt_id, Outcome.RETRYABLE_FAILURE) for _ in range(5)]

    assert {(a.job_state, a.retry_delay_ms) for a in answers} == {(first.job_state, first.retry_delay_ms)}
    assert harness.job(job_id).run_at_ms == run_at
    assert len(harness.attempts(job_id)) == 1


def test_r14_a_result_repeated_inside_one_batch_gets_the_first_answer(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.run(job_id)
    result = ResultReport(
        claimed.attempt_id,
        Report(Outcome.RETRYABLE_FAILURE, error_code="E"),
        sender=harness.holder(claimed.attempt_id),
    )

    answers = harness.ops.process(WorkBatch(results=[result, result])).results

    assert answers[0].accepted is True
    assert answers[1] == answers[0]
    assert harness.job(job_id).state is JobState.SCHEDULED
    assert [t["reason"] for t in harness.transitions(job_id)].count("E") == 1


# -- fencing ------------------------------------------------------------------------------


def test_r11_a_result_from_a_superseded_attempt_is_stale_and_changes_nothing(harness: Harness) -> None:
    job_id = harness.enqueue()
    old, current = _superseded_after_start(harness, job_id)
    harness.start(current)
    before = harness.snapshot(job_id)

    answer = harness.report(old, Outcome.SUCCEEDED, output=b"late")

    assert answer.accepted is False and answer.job_state is None
    assert answer.reason
    assert harness.snapshot(job_id) == before
    job = harness.job(job_id)
    assert (job.state, job.current_attempt_id, job.output, job.executions) == (
        JobState.RUNNING,
        current,
        None,
        2,
    )
    old_attempt = harness.attempts(job_id)[0]
    assert (old_attempt.id, old_attempt.outcome, old_attempt.reported) == (old, Outcome.ABANDONED, False)


def test_r11_a_result_after_a_release_is_stale(harness: Harness) -> None:
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    harness.release(claimed.attempt_id)
    before = harness.snapshot(job_id)

    answer = harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=b"x")

    assert answer.accepted is False
    assert harness.snapshot(job_id) == before


def test_a_result_for_a_claim_never_started_is_refused_for_that_and_changes_nothing(
    harness: Harness,
) -> None:
    """Not superseded (it is still the job's current claim): never started. The answer
    says so, and the claim waits for its start as before."""
    job_id = harness.enqueue()
    claimed = harness.claim_one(job_id)
    before = harness.snapshot(job_id)

    answer = harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=b"early")

    assert answer.accepted is False and answer.error is not None
    assert answer.error.reason == "ATTEMPT_NOT_STARTED"
    assert "never started" in answer.reason and "superseded" not in answer.reason
    assert harness.snapshot(job_id) == before
    assert harness.start(claimed.attempt_id).granted  # the claim is still good
    assert harness.report(claimed.attempt_id, Outcome.SUCCEEDED, output=b"ok").accepted


MALFORMED_ATTEMPT_IDS = ["", "not-a-uuid", "bad\x00id", UNKNOWN_ATTEMPT.upper(), "x" * 300]


@pytest.mark.parametrize("bad", MALFORMED_ATTEMPT_IDS, ids=["empty", "text", "nul", "upper", "long"])
def test_r11_malformed_attempt_ids_are_unknown_and_spoil_nothing_else_in_the_batch(
    harness: Harness, bad: str
) -> None:
    """Attempt IDs come straight from workers; one bad ID must not fail the batch (on
    PostgreSQL a NUL is refused by the database) nor the other workers' messages."""
    running = harness.run(harness.enqueue(queue="running"))
    waiting_id = harness.enqueue()
    before = harness.snapshot(running.job.id)
    claim = ClaimRequest("worker-2", (QUEUE,), (WIRE,), 1, LEASE_MS)

    answers = harness.ops.process(
        WorkBatch(
            releases=[AttemptMessage(bad, WORKER_IDENTITY)],
            starts=[AttemptMessage(bad, WORKER_IDENTITY)],
            heartbeats=[HeartbeatRequest([bad, running.attempt_id], LEASE_MS, WORKER_IDENTITY)],
            results=[ResultReport(bad, Report(Outcome.SUCCEEDED), sender=WORKER_IDENTITY)],
            claims=[claim],
        )
    )

    assert answers.starts[0].granted is False
    assert answers.lost == [{bad}]
    assert answers.results[0].accepted is False
    assert [c.job.id for c in answers.claims[0]] == [waiting_id]
    after = harness.snapshot(running.job.id)
    assert after.attempts == before.attempts and after.transitions == before.transitions
    assert after.job.state is JobState.RUNNING
