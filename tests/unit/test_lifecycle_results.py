"""R-5 outcomes of a started run, R-2 delays on the decision, R-6 middleware results."""

from __future__ import annotations

import random

import pytest
from domain_doubles import NOW_MS, EndOfRange, NoRandom, job_view
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.lifecycle import Decision, Report, decide_result
from coordinator.domain.states import (
    WORKER_OUTCOMES,
    JobState,
    Outcome,
    can_transition,
)
from worker_sdk.grammar import MAX_FAILURE_MESSAGE_BYTES, TRUNCATION_MARKER, is_valid_code

DETAIL_CAP = 16_384
SECOND = 1_000
RETRYABLE_REPORTS = [Outcome.RETRYABLE_FAILURE, Outcome.TIMED_OUT, Outcome.INTERRUPTED]


def _assert_retried(decision: Decision, outcome: Outcome, code: str) -> None:
    assert decision.attempt_outcome is outcome
    assert decision.job_state is JobState.SCHEDULED
    assert decision.error_code == code
    assert decision.retry_delay_ms is not None
    assert decision.run_at_ms == NOW_MS + decision.retry_delay_ms


def _assert_ended(decision: Decision, outcome: Outcome, state: JobState, code: str | None) -> None:
    assert decision.attempt_outcome is outcome
    assert decision.job_state is state
    assert decision.error_code == code
    assert decision.run_at_ms is None, "a finished job is not scheduled again"
    assert decision.retry_delay_ms is None


# --- R-5, one test per row the coordinator decides ------------------------------------


@pytest.mark.parametrize("executions", [1, 2, 3])
def test_r5_handler_returns_job_succeeded(executions: int, no_rng: NoRandom) -> None:
    """Succeeded whatever is left of the budget, also on the last execution."""
    job = job_view(executions=executions)
    decision = decide_result(job, Report(Outcome.SUCCEEDED), NOW_MS, DETAIL_CAP, no_rng)
    _assert_ended(decision, Outcome.SUCCEEDED, JobState.SUCCEEDED, None)


@pytest.mark.parametrize("executions", [1, 2])
@pytest.mark.parametrize("code", ["ValueError", "rate_limited"])
def test_r5_retryable_failure_is_retried_while_budget_lasts(
    executions: int, code: str, low_rng: EndOfRange
) -> None:
    """Code: the exception class name, or the code the exception carries."""
    job = job_view(executions=executions, max_executions=3)
    report = Report(Outcome.RETRYABLE_FAILURE, error_code=code, exception_type="ValueError", message="bad")
    decision = decide_result(job, report, NOW_MS, DETAIL_CAP, low_rng)
    _assert_retried(decision, Outcome.RETRYABLE_FAILURE, code)
    assert decision.message == "bad"


@pytest.mark.parametrize(("executions", "max_executions"), [(3, 3), (1, 1), (100, 100)])
def test_r5_r1_retryable_failure_on_the_last_execution_fails_the_job(
    executions: int, max_executions: int, low_rng: EndOfRange
) -> None:
    job = job_view(executions=executions, max_executions=max_executions)
    report = Report(Outcome.RETRYABLE_FAILURE, error_code="ValueError", message="bad")
    decision = decide_result(job, report, NOW_MS, DETAIL_CAP, low_rng)
    _assert_ended(decision, Outcome.RETRYABLE_FAILURE, JobState.FAILED, "ValueError")
    assert decision.message == "bad", "the last failure is kept on the attempt"


@pytest.mark.parametrize("executions", [1, 2, 3])
def test_r5_permanent_failure_is_not_retried(executions: int, no_rng: NoRandom) -> None:
    """PermanentJobFailure(code, message): failed at once with its code, budget or not."""
    job = job_view(executions=executions, max_executions=3)
    report = Report(
        Outcome.PERMANENT_FAILURE, error_code="order_not_found", message="Order o-1 does not exist."
    )
    decision = decide_result(job, report, NOW_MS, DETAIL_CAP, no_rng)
    _assert_ended(decision, Outcome.PERMANENT_FAILURE, JobState.FAILED, "order_not_found")
    assert decision.message == "Order o-1 does not exist."


def test_r5_timed_out_is_retryable_with_code_timeout(low_rng: EndOfRange) -> None:
    decision = decide_result(job_view(executions=1), Report(Outcome.TIMED_OUT), NOW_MS, DETAIL_CAP, low_rng)
    _assert_retried(decision, Outcome.TIMED_OUT, "timeout")


def test_r5_timed_out_on_the_last_execution_fails_with_code_timeout(low_rng: EndOfRange) -> None:
    decision = decide_result(job_view(executions=3), Report(Outcome.TIMED_OUT), NOW_MS, DETAIL_CAP, low_rng)
    _assert_ended(decision, Outcome.TIMED_OUT, JobState.FAILED, "timeout")


@pytest.mark.parametrize("executions", [1, 3])
def test_r5_cancelled_run_ends_cancelled_and_is_not_retried(executions: int, no_rng: NoRandom) -> None:
    job = job_view(executions=executions, max_executions=3)
    decision = decide_result(job, Report(Outcome.CANCELLED), NOW_MS, DETAIL_CAP, no_rng)
    _assert_ended(decision, Outcome.CANCELLED, JobState.CANCELLED, "cancelled")


def test_r5_interrupted_is_retryable_with_code_worker_shutdown(low_rng: EndOfRange) -> None:
    decision = decide_result(job_view(executions=1), Report(Outcome.INTERRUPTED), NOW_MS, DETAIL_CAP, low_rng)
    _assert_retried(decision, Outcome.INTERRUPTED, "worker_shutdown")


def test_r5_interrupted_on_the_last_execution_fails(low_rng: EndOfRange) -> None:
    decision = decide_result(job_view(executions=3), Report(Outcome.INTERRUPTED), NOW_MS, DETAIL_CAP, low_rng)
    _assert_ended(decision, Outcome.INTERRUPTED, JobState.FAILED, "worker_shutdown")


@pytest.mark.parametrize("code", ["payload_undecodable", "output_too_large"])
@pytest.mark.parametrize("executions", [1, 2])
def test_r5_sdk_permanent_failures_fail_with_their_code(code: str, executions: int, no_rng: NoRandom) -> None:
    """Payload not decodable/upgradable, output over max_output_bytes: failed, never retried."""
    job = job_view(executions=executions, max_executions=3)
    decision = decide_result(
        job, Report(Outcome.PERMANENT_FAILURE, error_code=code), NOW_MS, DETAIL_CAP, no_rng
    )
    _assert_ended(decision, Outcome.PERMANENT_FAILURE, JobState.FAILED, code)


def test_r5_retryable_failure_without_a_code_still_gets_a_valid_one(low_rng: EndOfRange) -> None:
    decision = decide_result(job_view(), Report(Outcome.RETRYABLE_FAILURE), NOW_MS, DETAIL_CAP, low_rng)
    assert decision.error_code
    assert is_valid_code(decision.error_code)


@pytest.mark.parametrize("outcome", [Outcome.RETRYABLE_FAILURE, Outcome.PERMANENT_FAILURE])
def test_r5_a_code_outside_the_grammar_is_made_valid(outcome: Outcome, low_rng: EndOfRange) -> None:
    """An exception class named in another script must not break the name grammar."""
    report = Report(outcome, error_code="ОшибкаОплаты" + "x" * 200)
    decision = decide_result(job_view(), report, NOW_MS, DETAIL_CAP, low_rng)
    assert decision.error_code is not None
    assert is_valid_code(decision.error_code)
    assert decision.error_code.endswith("x" * 100)


def test_r4_a_run_that_ends_resets_the_unstarted_streak(low_rng: EndOfRange) -> None:
    """A claim that starts resets the guard: its end writes a streak of zero."""
    job = job_view(executions=1, unstarted_streak=4)
    for outcome in WORKER_OUTCOMES:
        decision = decide_result(job, Report(outcome), NOW_MS, DETAIL_CAP, low_rng)
        assert decision.unstarted_streak == 0, outcome


# --- R-2 on the decision -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("executions", "low", "high"),
    [(1, 2_500, 5_000), (2, 5_000, 10_000), (3, 10_000, 20_000), (4, 20_000, 40_000), (5, 30_000, 60_000)],
)
@pytest.mark.parametrize("outcome", RETRYABLE_REPORTS)
def test_r2_retry_after_run_n_waits_within_the_seed_table(
    executions: int, low: int, high: int, outcome: Outcome, low_rng: EndOfRange, high_rng: EndOfRange
) -> None:
    """The run that just ended is run ``executions``; its delay is stored on the decision."""
    job = job_view(executions=executions, max_executions=10)
    shortest = decide_result(job, Report(outcome), NOW_MS, DETAIL_CAP, low_rng)
    longest = decide_result(job, Report(outcome), NOW_MS, DETAIL_CAP, high_rng)
    assert low_rng.calls == [(low, high)]
    assert (shortest.retry_delay_ms, shortest.run_at_ms) == (low, NOW_MS + low)
    assert (longest.retry_delay_ms, longest.run_at_ms) == (high, NOW_MS + high)


@pytest.mark.parametrize("executions", [1, 2, 3, 4, 5, 6, 7, 8])
def test_r2_random_retry_delay_is_stored_and_sets_run_at(executions: int) -> None:
    nominal = min(5_000 * 2 ** (executions - 1), 60_000)
    job = job_view(executions=executions, max_executions=10)
    for seed in range(300):
        decision = decide_result(
            job, Report(Outcome.RETRYABLE_FAILURE), NOW_MS, DETAIL_CAP, random.Random(seed)
        )
        assert decision.retry_delay_ms is not None
        assert nominal / 2 <= decision.retry_delay_ms <= nominal
        assert decision.run_at_ms == NOW_MS + decision.retry_delay_ms


def test_r2_retry_delay_follows_the_jobs_own_settings(low_rng: EndOfRange, high_rng: EndOfRange) -> None:
    """Configured 30 s doubling to 10 min (the seed's WithRetryDelay example)."""
    job = job_view(executions=2, retry_initial_delay_ms=30 * SECOND, retry_max_delay_ms=600 * SECOND)
    shortest = decide_result(job, Report(Outcome.TIMED_OUT), NOW_MS, DETAIL_CAP, low_rng)
    longest = decide_result(job, Report(Outcome.TIMED_OUT), NOW_MS, DETAIL_CAP, high_rng)
    assert (shortest.retry_delay_ms, longest.retry_delay_ms) == (30 * SECOND, 60 * SECOND)


# --- R-6 middleware results --------------------------------------------------------------


def _retry(delay_ms: int | None, code: str = "rate_limited") -> Report:
    """Middleware ``Retry(reason, delay)`` as the worker reports it."""
    return Report(Outcome.RETRYABLE_FAILURE, error_code=code, explicit_retry_delay_ms=delay_ms)


@pytest.mark.parametrize("delay_ms", [1, 1_234, 120 * SECOND, 600 * SECOND])
def test_r6_explicit_retry_delay_is_used_as_given_without_jitter(delay_ms: int, no_rng: NoRandom) -> None:
    job = job_view(executions=1, retry_max_delay_ms=600 * SECOND)
    decision = decide_result(job, _retry(delay_ms), NOW_MS, DETAIL_CAP, no_rng)
    _assert_retried(decision, Outcome.RETRYABLE_FAILURE, "rate_limited")
    assert decision.retry_delay_ms == delay_ms


@pytest.mark.parametrize("delay_ms", [60 * SECOND + 1, 120 * SECOND, 86_400_000 * 10])
def test_r6_explicit_retry_delay_is_capped_at_the_max_retry_delay(delay_ms: int, no_rng: NoRandom) -> None:
    job = job_view(executions=1)  # default max retry delay: 60 s
    decision = decide_result(job, _retry(delay_ms), NOW_MS, DETAIL_CAP, no_rng)
    assert decision.retry_delay_ms == 60 * SECOND
    assert decision.run_at_ms == NOW_MS + 60 * SECOND


def test_r6_explicit_retry_delay_of_zero_retries_at_once(no_rng: NoRandom) -> None:
    decision = decide_result(job_view(executions=1), _retry(0), NOW_MS, DETAIL_CAP, no_rng)
    _assert_retried(decision, Outcome.RETRYABLE_FAILURE, "rate_limited")
    assert decision.retry_delay_ms == 0
    assert decision.run_at_ms == NOW_MS


@pytest.mark.parametrize("delay_ms", [-1, -60 * SECOND])
@pytest.mark.parametrize("executions", [1, 2])
def test_r6_negative_retry_delay_fails_the_job_permanently(
    delay_ms: int, executions: int, no_rng: NoRandom
) -> None:
    """A contract fault of the middleware: failed even with budget left."""
    job = job_view(executions=executions, max_executions=3)
    decision = decide_result(job, _retry(delay_ms), NOW_MS, DETAIL_CAP, no_rng)
    _assert_ended(decision, Outcome.PERMANENT_FAILURE, JobState.FAILED, "negative_retry_delay")


def test_r6_explicit_retry_on_the_last_execution_fails(no_rng: NoRandom) -> None:
    """Retry(reason, delay) still uses up one execution."""
    decision = decide_result(
        job_view(executions=3, max_executions=3), _retry(1_000), NOW_MS, DETAIL_CAP, no_rng
    )
    _assert_ended(decision, Outcome.RETRYABLE_FAILURE, JobState.FAILED, "rate_limited")


def test_r6_retry_without_a_delay_uses_the_r2_policy(low_rng: EndOfRange) -> None:
    decision = decide_result(job_view(executions=2), _retry(None), NOW_MS, DETAIL_CAP, low_rng)
    assert low_rng.calls == [(5_000, 10_000)]
    assert decision.retry_delay_ms == 5_000


def test_r6_explicit_delay_is_ignored_on_a_permanent_failure(no_rng: NoRandom) -> None:
    report = Report(Outcome.PERMANENT_FAILURE, error_code="bad_request", explicit_retry_delay_ms=1_000)
    decision = decide_result(job_view(executions=1), report, NOW_MS, DETAIL_CAP, no_rng)
    _assert_ended(decision, Outcome.PERMANENT_FAILURE, JobState.FAILED, "bad_request")


def test_r6_failed_result_fails_permanently_with_its_code_and_message(no_rng: NoRandom) -> None:
    report = Report(
        Outcome.PERMANENT_FAILURE, error_code="bad_request", message="The provider rejected the request."
    )
    decision = decide_result(job_view(executions=1), report, NOW_MS, DETAIL_CAP, no_rng)
    _assert_ended(decision, Outcome.PERMANENT_FAILURE, JobState.FAILED, "bad_request")
    assert decision.message == "The provider rejected the request."


@pytest.mark.parametrize("char", ["a", "é", "€", "😀"])
@pytest.mark.parametrize("outcome", [Outcome.PERMANENT_FAILURE, Outcome.RETRYABLE_FAILURE, Outcome.CANCELLED])
def test_r6_a_message_over_1024_bytes_is_truncated_utf8_safe(
    char: str, outcome: Outcome, low_rng: EndOfRange
) -> None:
    message = char * 1_500
    decision = decide_result(job_view(), Report(outcome, message=message), NOW_MS, DETAIL_CAP, low_rng)
    encoded = decision.message.encode("utf-8")
    assert len(encoded) <= MAX_FAILURE_MESSAGE_BYTES
    assert len(encoded) > MAX_FAILURE_MESSAGE_BYTES - len(char.encode("utf-8")), "cut no shorter than needed"
    assert message.startswith(decision.message)


def test_r6_a_message_within_1024_bytes_is_kept(no_rng: NoRandom) -> None:
    message = "é" * 512  # exactly 1,024 bytes
    report = Report(Outcome.PERMANENT_FAILURE, message=message)
    assert decide_result(job_view(), report, NOW_MS, DETAIL_CAP, no_rng).message == message


@pytest.mark.parametrize("char", ["x", "é", "€", "😀"])
def test_failure_detail_is_truncated_with_a_marker_inside_the_cap(char: str, no_rng: NoRandom) -> None:
    """docs/limits.md max_failure_detail_bytes: byte-exact, no split code point, marker inside."""
    detail = char * 20_000
    report = Report(Outcome.PERMANENT_FAILURE, detail=detail)
    decision = decide_result(job_view(), report, NOW_MS, DETAIL_CAP, no_rng)
    encoded = decision.detail.encode("utf-8")
    assert DETAIL_CAP - len(char.encode("utf-8")) < len(encoded) <= DETAIL_CAP
    assert decision.detail.endswith(TRUNCATION_MARKER)
    assert detail.startswith(decision.detail.removesuffix(TRUNCATION_MARKER))


def test_failure_detail_within_the_cap_is_kept(no_rng: NoRandom) -> None:
    detail = "Traceback (most recent call last):\n  ValueError: é€😀\n"
    report = Report(Outcome.PERMANENT_FAILURE, detail=detail)
    assert decide_result(job_view(), report, NOW_MS, DETAIL_CAP, no_rng).detail == detail


def test_failure_detail_cap_is_the_one_passed_in(no_rng: NoRandom) -> None:
    report = Report(Outcome.PERMANENT_FAILURE, detail="y" * 500)
    decision = decide_result(job_view(), report, NOW_MS, 100, no_rng)
    assert len(decision.detail.encode("utf-8")) == 100
    assert decision.detail.endswith(TRUNCATION_MARKER)


# --- properties over every report --------------------------------------------------------


@given(
    outcome=st.sampled_from(sorted(WORKER_OUTCOMES)),
    max_executions=st.integers(min_value=1, max_value=100),
    data=st.data(),
    error_code=st.text(max_size=150),
    explicit=st.none() | st.integers(min_value=-(10**9), max_value=10**9),
    seed=st.integers(),
)
def test_r1_r5_every_decision_is_a_legal_consistent_transition(
    outcome: Outcome,
    max_executions: int,
    data: st.DataObject,
    error_code: str,
    explicit: int | None,
    seed: int,
) -> None:
    executions = data.draw(st.integers(min_value=1, max_value=max_executions), label="executions")
    job = job_view(executions=executions, max_executions=max_executions)
    report = Report(outcome, error_code=error_code, explicit_retry_delay_ms=explicit)
    decision = decide_result(job, report, NOW_MS, DETAIL_CAP, random.Random(seed))

    assert can_transition(JobState.RUNNING, decision.job_state)
    assert decision.job_state in {JobState.SCHEDULED, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
    if decision.job_state is JobState.SCHEDULED:
        assert executions < max_executions, "retried only while budget lasts"
        assert decision.retry_delay_ms is not None
        assert 0 <= decision.retry_delay_ms <= job.settings.retry_max_delay_ms
        assert decision.run_at_ms == NOW_MS + decision.retry_delay_ms
    else:
        assert decision.run_at_ms is None
        assert decision.retry_delay_ms is None
    if decision.job_state is JobState.SUCCEEDED:
        assert decision.error_code is None
    else:
        assert decision.error_code is not None
        assert is_valid_code(decision.error_code)
