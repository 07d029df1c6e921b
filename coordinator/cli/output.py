"""What the client commands print: aligned tables and times for people, and for
``--json`` the SDK's values in the shape these commands have always printed.

That shape is protobuf's JSON mapping of the wire messages (``MessageToDict`` with the
.proto field names): fields in .proto order, unset and zero values left out, enums by
their wire names (``JOB_STATE_FAILED``), times and durations as RFC 3339 strings, bytes
in base64 and int64 as a string. ``job_json`` and its siblings rebuild it from the SDK's
values, field by field, so scripts keep reading what they read before.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from worker_sdk import (
    AttemptInfo,
    AuditEvent,
    JobInfo,
    JobSettings,
    JobState,
    Outcome,
    RevealedError,
    ScheduleInfo,
    TokenInfo,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def table(headers: list[str], rows: list[list[str]]) -> None:
    """Prints ``rows`` under ``headers`` in columns two spaces apart."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def show_time(moment: datetime | None, timespec: str = "milliseconds") -> str:
    """ISO 8601 in UTC; an unset time shows as the epoch, the wire's zero value."""
    return (moment or _EPOCH).isoformat(timespec=timespec)


def job_json(job: JobInfo) -> dict[str, Any]:
    """A job as ``--json`` prints it (the wire ``Job``)."""
    return _message(
        id=job.id,
        wire_name=job.wire_name,
        queue=job.queue,
        payload=job.payload,
        payload_version=job.payload_version,
        priority=job.priority,
        state=job.state,
        run_at=job.run_at,
        idempotency_key=job.idempotency_key,
        settings=_settings_json(job.settings),
        executions=job.executions,
        unstarted_abandonments=job.unstarted_abandonments,
        generation=job.generation,
        current_attempt_id=job.current_attempt_id,
        lease_expires_at=job.lease_expires_at,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
        last_error_code=job.last_error_code,
        output=job.output,
        parent_ids=job.parent_ids,
        cancel_requested=job.cancel_requested,
        child_ids=job.child_ids,
    )


def _settings_json(settings: JobSettings) -> dict[str, Any]:
    # The coordinator sends every effective value on a job, and no_execution_timeout
    # exactly when there is no timeout.
    return _message(
        max_executions=settings.max_executions,
        retry_initial_delay=settings.retry_initial_delay,
        retry_max_delay=settings.retry_max_delay,
        execution_timeout=settings.execution_timeout,
        no_execution_timeout=settings.execution_timeout is None,
        max_unstarted_abandonments=settings.max_unstarted_abandonments,
        unstarted_initial_delay=settings.unstarted_initial_delay,
        unstarted_max_delay=settings.unstarted_max_delay,
    )


def attempt_json(attempt: AttemptInfo) -> dict[str, Any]:
    """An attempt as ``--json`` prints it (the wire ``Attempt``)."""
    return _message(
        id=attempt.id,
        job_id=attempt.job_id,
        generation=attempt.generation,
        worker_id=attempt.worker_id,
        execution_number=attempt.execution_number,
        claimed_at=attempt.claimed_at,
        started_at=attempt.started_at,
        finished_at=attempt.finished_at,
        outcome=attempt.outcome,
        error_code=attempt.error_code,
        exception_type=attempt.exception_type,
        retry_delay=attempt.retry_delay,
    )


def revealed_json(revealed: RevealedError) -> dict[str, Any]:
    """A revealed error as ``--json`` prints it (the wire ``RevealErrorResponse``)."""
    return _message(
        attempt_id=revealed.attempt_id,
        job_id=revealed.job_id,
        generation=revealed.generation,
        error_code=revealed.error_code,
        exception_type=revealed.exception_type,
        message=revealed.message,
        detail=revealed.detail,
    )


def token_json(token: TokenInfo) -> dict[str, Any]:
    """A token as ``--json`` prints it (the wire ``Token``)."""
    return _message(
        id=token.id,
        name=token.name,
        scopes=token.scopes,
        queues=token.queues,
        created_at=token.created_at,
        created_by=token.created_by,
        revoked_at=token.revoked_at,
    )


def audit_json(event: AuditEvent) -> dict[str, Any]:
    """An audit event as ``--json`` prints it (the wire ``AuditEvent``)."""
    return _message(
        id=str(event.id) if event.id else None,  # int64: a string in protobuf's JSON
        at=event.at,
        actor_token_id=event.actor_token_id,
        actor_name=event.actor_name,
        action=event.action,
        target=event.target,
        peer=event.peer,
        detail=event.detail,
    )


def schedule_json(schedule: ScheduleInfo) -> dict[str, Any]:
    """A schedule as ``--json`` prints it (the wire ``Schedule``)."""
    return _message(
        name=schedule.name,
        cron=schedule.cron,
        timezone=schedule.timezone,
        wire_name=schedule.wire_name,
        payload=schedule.payload,
        queue=schedule.queue,
        catch_up=f"CATCH_UP_{schedule.catch_up.name}",
        paused=schedule.paused,
        created_at=schedule.created_at,
        updated_at=schedule.updated_at,
        last_tick=schedule.last_tick,
        last_job_id=schedule.last_job_id,
        next_runs=[_json_value(moment) for moment in schedule.next_runs],
        skipped_ticks=[_json_value(moment) for moment in schedule.skipped_ticks],
    )


def _message(**fields: object) -> dict[str, Any]:
    """The JSON object of a message with these fields, given in .proto order."""
    return {name: _json_value(value) for name, value in fields.items() if not _unset(value)}


def _unset(value: object) -> bool:
    """True for what protobuf leaves out: unset fields and proto3 zero values (a set
    message field, even an empty or zero one, stays)."""
    if value is None:
        return True
    if isinstance(value, datetime | timedelta | dict):
        return False
    return not value


def _json_value(value: object) -> object:
    if isinstance(value, JobState):
        return f"JOB_STATE_{value.name}"
    if isinstance(value, Outcome):
        return f"OUTCOME_{value.name}"
    if isinstance(value, datetime):
        stamp = Timestamp()
        stamp.FromDatetime(value)
        return stamp.ToJsonString()
    if isinstance(value, timedelta):
        duration = Duration()
        duration.FromTimedelta(value)
        return duration.ToJsonString()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, tuple):
        return list(value)
    return value


def show_bytes(data: bytes | None, limit: int = 200) -> str:
    """A payload or output for a person: its text when it is UTF-8 (cut at ``limit``
    characters), else its size."""
    if data is None:
        return "-"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"({len(data)} bytes, not text)"
    if not text.isprintable():
        text = text.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + f"… ({len(data)} bytes)"
