"""Conversions between protobuf messages and the SDK's Python values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from google.protobuf import duration_pb2

from worker_sdk._errors import CoordinatorError
from worker_sdk._info import (
    AttemptInfo,
    AuditEvent,
    CreatedToken,
    EnqueuedJob,
    JobInfo,
    JobState,
    RevealedError,
    TokenInfo,
)
from worker_sdk._pipeline import RunReport
from worker_sdk._progress import progress_from_proto
from worker_sdk._results import Outcome
from worker_sdk._settings import JobSettings
from worker_sdk.proto.runwick.v1 import admin_service_pb2, job_pb2, job_service_pb2, worker_service_pb2

_STATE_PREFIX = "JOB_STATE_"
_OUTCOME_PREFIX = "OUTCOME_"


def duration(value: timedelta) -> duration_pb2.Duration:
    """A protobuf Duration for ``value`` (negative durations keep one sign)."""
    message = duration_pb2.Duration()
    message.FromTimedelta(value)
    return message


def optional_timedelta(message: Any, field: str) -> timedelta | None:
    """The Duration ``field`` of ``message`` as a timedelta, None when unset."""
    if not message.HasField(field):
        return None
    value: timedelta = getattr(message, field).ToTimedelta()
    return value


def optional_datetime(message: Any, field: str) -> datetime | None:
    """The Timestamp ``field`` of ``message`` as an aware UTC datetime, None when unset."""
    if not message.HasField(field):
        return None
    value: datetime = getattr(message, field).ToDatetime(tzinfo=UTC)
    return value


def state_to_proto(state: JobState) -> job_pb2.JobState:
    """The wire enum value of a state."""
    return cast("job_pb2.JobState", job_pb2.JobState.Value(_STATE_PREFIX + state.name))


def state_from_proto(value: int) -> JobState:
    """The state for a wire enum value; raises CoordinatorError for unknown ones."""
    try:
        name = job_pb2.JobState.Name(value)
        return JobState[name.removeprefix(_STATE_PREFIX)]
    except (KeyError, ValueError):
        raise CoordinatorError(f"coordinator sent unknown job state {value}; upgrade the SDK") from None


def outcome_to_proto(outcome: Outcome) -> job_pb2.Outcome:
    """The wire enum value of an outcome."""
    return cast("job_pb2.Outcome", job_pb2.Outcome.Value(_OUTCOME_PREFIX + outcome.name))


def outcome_from_proto(value: int) -> Outcome | None:
    """The outcome for a wire enum value; None for unspecified or unknown values."""
    try:
        name = job_pb2.Outcome.Name(value)
        return Outcome[name.removeprefix(_OUTCOME_PREFIX)]
    except (KeyError, ValueError):
        return None


def settings_from_proto(message: job_pb2.JobSettings) -> JobSettings:
    """Effective settings; fields the coordinator left unset are the library defaults."""
    defaults = JobSettings()
    return JobSettings(
        max_executions=(
            message.max_executions if message.HasField("max_executions") else defaults.max_executions
        ),
        retry_initial_delay=(
            optional_timedelta(message, "retry_initial_delay") or defaults.retry_initial_delay
        ),
        retry_max_delay=optional_timedelta(message, "retry_max_delay") or defaults.retry_max_delay,
        execution_timeout=optional_timedelta(message, "execution_timeout"),
        max_unstarted_abandonments=(
            message.max_unstarted_abandonments
            if message.HasField("max_unstarted_abandonments")
            else defaults.max_unstarted_abandonments
        ),
        unstarted_initial_delay=(
            optional_timedelta(message, "unstarted_initial_delay") or defaults.unstarted_initial_delay
        ),
        unstarted_max_delay=(
            optional_timedelta(message, "unstarted_max_delay") or defaults.unstarted_max_delay
        ),
    )


def job_from_proto(message: job_pb2.Job) -> JobInfo:
    """A JobInfo from a wire Job."""
    return JobInfo(
        id=message.id,
        wire_name=message.wire_name,
        queue=message.queue,
        state=state_from_proto(message.state),
        payload=bytes(message.payload),
        payload_version=message.payload_version,
        priority=message.priority,
        settings=settings_from_proto(message.settings),
        executions=message.executions,
        unstarted_abandonments=message.unstarted_abandonments,
        generation=message.generation,
        run_at=optional_datetime(message, "run_at"),
        idempotency_key=message.idempotency_key or None,
        current_attempt_id=message.current_attempt_id or None,
        lease_expires_at=optional_datetime(message, "lease_expires_at"),
        created_at=optional_datetime(message, "created_at"),
        updated_at=optional_datetime(message, "updated_at"),
        finished_at=optional_datetime(message, "finished_at"),
        last_error_code=message.last_error_code or None,
        output=bytes(message.output) or None,
        parent_ids=tuple(message.parent_ids),
        child_ids=tuple(message.child_ids),
        cancel_requested=message.cancel_requested,
        progress=progress_from_proto(message.progress) if message.HasField("progress") else None,
        waiting_reason=message.waiting_reason or None,
    )


def attempt_from_proto(message: job_pb2.Attempt) -> AttemptInfo:
    """An AttemptInfo from a wire Attempt."""
    return AttemptInfo(
        id=message.id,
        job_id=message.job_id,
        generation=message.generation,
        worker_id=message.worker_id,
        execution_number=message.execution_number,
        claimed_at=optional_datetime(message, "claimed_at"),
        started_at=optional_datetime(message, "started_at"),
        finished_at=optional_datetime(message, "finished_at"),
        outcome=outcome_from_proto(message.outcome),
        error_code=message.error_code or None,
        exception_type=message.exception_type or None,
        retry_delay=optional_timedelta(message, "retry_delay"),
    )


def revealed_from_proto(message: job_service_pb2.RevealErrorResponse) -> RevealedError:
    """A RevealedError from a RevealError answer."""
    return RevealedError(
        attempt_id=message.attempt_id,
        job_id=message.job_id,
        generation=message.generation,
        error_code=message.error_code or None,
        exception_type=message.exception_type or None,
        message=message.message,
        detail=message.detail,
    )


def enqueued_from_proto(message: job_service_pb2.EnqueuedJob) -> EnqueuedJob:
    """An EnqueuedJob from one entry of an Enqueue answer."""
    return EnqueuedJob(id=message.id, existing=message.existing, state=state_from_proto(message.state))


def token_from_proto(message: admin_service_pb2.Token) -> TokenInfo:
    """A TokenInfo from a wire Token."""
    return TokenInfo(
        id=message.id,
        name=message.name,
        scopes=tuple(message.scopes),
        queues=tuple(message.queues),
        created_at=optional_datetime(message, "created_at"),
        created_by=message.created_by or None,
        revoked_at=optional_datetime(message, "revoked_at"),
    )


def created_token_from_proto(message: admin_service_pb2.CreateTokenResponse) -> CreatedToken:
    """A CreatedToken from a CreateToken answer."""
    return CreatedToken(token=token_from_proto(message.token), secret=message.secret)


def audit_event_from_proto(message: admin_service_pb2.AuditEvent) -> AuditEvent:
    """An AuditEvent from a wire AuditEvent."""
    return AuditEvent(
        id=message.id,
        action=message.action,
        target=message.target,
        actor_name=message.actor_name,
        actor_token_id=message.actor_token_id or None,
        at=optional_datetime(message, "at"),
        peer=message.peer,
        detail=message.detail or None,
    )


def result_message(attempt_id: str, report: RunReport) -> worker_service_pb2.ConnectRequest:
    """The Result message for one run's report."""
    result = worker_service_pb2.Result(
        attempt_id=attempt_id,
        outcome=outcome_to_proto(report.outcome),
        error_code=report.error_code,
        exception_type=report.exception_type,
        message=report.message,
        detail=report.detail,
        output=report.output or b"",
    )
    if report.retry_delay is not None:
        result.retry_delay.FromTimedelta(report.retry_delay)
    return worker_service_pb2.ConnectRequest(result=result)
