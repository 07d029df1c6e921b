"""Test doubles for the pure domain: stub random sources and a builder of jobs as the lifecycle sees them.

Test modules import this by its bare name (pytest puts this directory on ``sys.path``).
"""

from __future__ import annotations

import dataclasses

from coordinator.domain.records import AttemptRecord, JobRecord
from coordinator.domain.settings import JobSettings
from coordinator.domain.states import JobState

ATTEMPT_ID = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
"""The current attempt of jobs built by ``job_view``."""
OTHER_ATTEMPT_ID = "0193a7c2-5b1e-7c3d-9f00-ffffffffffff"
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, FakeClock's default start


class EndOfRange:
    """A RandomSource that always picks one end of the range it is asked for.

    It records every ``(a, b)`` it was asked for, so a test can check the range itself.
    """

    def __init__(self, end: str) -> None:
        if end not in ("low", "high"):
            raise ValueError(end)
        self.end = end
        self.calls: list[tuple[int, int]] = []

    def randint(self, a: int, b: int) -> int:
        self.calls.append((a, b))
        return a if self.end == "low" else b


class NoRandom:
    """A RandomSource that fails the test when used: proves a decision has no jitter."""

    def randint(self, a: int, b: int) -> int:
        raise AssertionError(f"randomness used: randint({a}, {b})")


def job_view(
    state: JobState = JobState.RUNNING,
    *,
    executions: int = 1,
    unstarted_streak: int = 0,
    current_attempt_id: str | None = ATTEMPT_ID,
    cancel_requested: bool = False,
    **settings: int | None,
) -> JobRecord:
    """A job as the lifecycle sees it (``JOB_RECORD`` with these fields); settings
    fields may be passed as keywords (``max_executions=5``), the rest are the defaults."""
    valid = JobSettings(**settings).validate()  # type: ignore[arg-type]
    return dataclasses.replace(
        JOB_RECORD,
        state=state,
        executions=executions,
        unstarted_streak=unstarted_streak,
        current_attempt_id=current_attempt_id,
        cancel_requested=cancel_requested,
        **{field.name: getattr(valid, field.name) for field in dataclasses.fields(JobSettings)},
    )


# A job and one of its attempts as the store holds them.
JOB_RECORD = JobRecord(
    id="0190f0a0-0000-7000-8000-000000000001",
    wire_name="mail.send",
    queue="mail",
    state=JobState.AVAILABLE,
    priority=3,
    run_at_ms=1_000,
    payload=b'{"to": "a@example.com"}',
    payload_version=2,
    idempotency_key="key-1",
    max_executions=5,
    retry_initial_delay_ms=100,
    retry_max_delay_ms=10_000,
    execution_timeout_ms=None,
    max_unstarted_abandonments=3,
    unstarted_initial_delay_ms=50,
    unstarted_max_delay_ms=500,
    generation=1,
    executions=0,
    unstarted_streak=0,
    current_attempt_id=None,
    worker_id=None,
    lease_expires_at_ms=None,
    created_at_ms=900,
    updated_at_ms=900,
    finished_at_ms=None,
    last_error_code=None,
    output=None,
    history_seq=1,
    cancel_requested=False,
    unique_key=None,
)
ATTEMPT_RECORD = AttemptRecord(
    id="0190f0a0-0000-7000-8000-0000000000a1",
    job_id=JOB_RECORD.id,
    generation=1,
    worker_id="worker-1",
    execution_number=0,
    claimed_at_ms=1_100,
    started_at_ms=None,
    finished_at_ms=None,
    outcome=None,
    error_code=None,
    exception_type=None,
    message=None,
    detail=None,
    retry_delay_ms=None,
    job_state_after=None,
    reported=False,
    token_id="token-1",
)
