"""Rows to domain values and back: the only place that knows column names besides the
schema and the statements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from coordinator.domain.access import Scope, format_scopes
from coordinator.domain.records import (
    AttemptEnd,
    AttemptRecord,
    AuditEvent,
    Dependency,
    JobRecord,
    NewAttempt,
    QueueRecord,
    TokenRecord,
    Transition,
)
from coordinator.domain.states import JobState, Outcome

JOB_FIELDS = tuple(f.name for f in fields(JobRecord))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(AttemptRecord))
WRITTEN_JOB_FIELDS = tuple(name for name in JOB_FIELDS if name not in ("id", "history_seq", "updated_at_ms"))
"""Fields a change may set; the store itself keeps ``history_seq`` and ``updated_at_ms``."""


def job_from_row(row: Any) -> JobRecord:
    return job_from_mapping(row._mapping)


def job_from_mapping(mapping: Mapping[str, Any]) -> JobRecord:
    values = dict(mapping)
    values["state"] = JobState(values["state"])
    values["payload"] = bytes(values["payload"])
    if values["output"] is not None:
        values["output"] = bytes(values["output"])
    values["cancel_requested"] = bool(values["cancel_requested"])
    return JobRecord(**{name: values[name] for name in JOB_FIELDS})


def job_row(job: JobRecord) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in JOB_FIELDS}
    row["state"] = job.state.value
    return row


def column_value(name: str, value: Any) -> Any:
    return value.value if name == "state" else value


def changed_columns(before: JobRecord, after: JobRecord) -> dict[str, Any]:
    """The columns ``after`` sets differently from ``before``."""
    return {
        name: column_value(name, getattr(after, name))
        for name in WRITTEN_JOB_FIELDS
        if getattr(after, name) != getattr(before, name)
    }


def attempt_from_row(row: Any) -> AttemptRecord:
    values = dict(row._mapping)
    if values["outcome"] is not None:
        values["outcome"] = Outcome(values["outcome"])
    if values["job_state_after"] is not None:
        values["job_state_after"] = JobState(values["job_state_after"])
    values["reported"] = bool(values["reported"])
    return AttemptRecord(**{name: values[name] for name in _ATTEMPT_FIELDS})


def new_attempt_row(attempt: NewAttempt) -> dict[str, Any]:
    return {
        "id": attempt.id,
        "job_id": attempt.job_id,
        "generation": attempt.generation,
        "worker_id": attempt.worker_id,
        "execution_number": 0,
        "claimed_at_ms": attempt.claimed_at_ms,
        "reported": False,
        "token_id": attempt.token_id,
    }


FINISH_COLUMNS = (
    "finished_at_ms",
    "outcome",
    "error_code",
    "exception_type",
    "message",
    "detail",
    "retry_delay_ms",
    "job_state_after",
    "reported",
)


def attempt_end_params(end: AttemptEnd) -> dict[str, Any]:
    """Parameters of the guarded finish statement (``g_id`` and ``v_<column>``)."""
    return {
        "g_id": end.attempt_id,
        "v_finished_at_ms": end.finished_at_ms,
        "v_outcome": end.outcome.value,
        "v_error_code": end.error_code,
        "v_exception_type": end.exception_type,
        "v_message": end.message,
        "v_detail": end.detail,
        "v_retry_delay_ms": end.retry_delay_ms,
        "v_job_state_after": end.job_state_after.value,
        "v_reported": end.reported,
    }


def queue_from_row(row: Any) -> QueueRecord:
    values = row._mapping
    return QueueRecord(
        name=values["name"],
        paused=bool(values["paused"]),
        concurrency_limit=values["concurrency_limit"],
        created_at_ms=values["created_at_ms"],
        updated_at_ms=values["updated_at_ms"],
    )


def dependency_row(dependency: Dependency) -> dict[str, Any]:
    return {
        "child_id": dependency.child_id,
        "parent_id": dependency.parent_id,
        "satisfied": dependency.satisfied,
        "parent_output": dependency.parent_output,
    }


def transition_from_row(row: Any) -> Transition:
    values = row._mapping
    return Transition(
        job_id=values["job_id"],
        seq=values["seq"],
        at_ms=values["at_ms"],
        from_state=JobState(values["from_state"]) if values["from_state"] is not None else None,
        to_state=JobState(values["to_state"]),
        attempt_id=values["attempt_id"],
        reason=values["reason"],
    )


def token_from_row(row: Any) -> TokenRecord:
    values = dict(row._mapping)
    scopes = frozenset(Scope(name) for name in values["scopes"].split(",") if name)
    queues = values["queues"]
    return TokenRecord(
        id=values["id"],
        name=values["name"],
        secret_sha256=values["secret_sha256"],
        scopes=scopes,
        queues=frozenset(queues.split(",")) if queues else None,
        created_at_ms=values["created_at_ms"],
        created_by=values["created_by"],
        revoked_at_ms=values["revoked_at_ms"],
    )


def token_row(token: TokenRecord) -> dict[str, Any]:
    return {
        "id": token.id,
        "name": token.name,
        "secret_sha256": token.secret_sha256,
        "scopes": format_scopes(token.scopes),
        "queues": ",".join(sorted(token.queues)) if token.queues else None,
        "created_at_ms": token.created_at_ms,
        "created_by": token.created_by,
        "revoked_at_ms": token.revoked_at_ms,
    }


def event_from_row(row: Any) -> AuditEvent:
    return AuditEvent(**dict(row._mapping))


def event_row(event: AuditEvent) -> dict[str, Any]:
    return {
        "at_ms": event.at_ms,
        "actor_token_id": event.actor_token_id,
        "actor_name": event.actor_name[:128],
        "action": event.action,
        "target": event.target[:128],
        "peer": event.peer[:256],
        "detail": event.detail,
    }
