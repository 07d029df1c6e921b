"""Rows as typed values, and their conversion to the domain's view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from coordinator.domain.lifecycle import JobView
from coordinator.domain.settings import JobSettings
from coordinator.domain.states import JobState, Outcome


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: str
    wire_name: str
    queue: str
    state: JobState
    priority: int
    run_at_ms: int
    payload: bytes
    payload_version: int
    idempotency_key: str | None
    max_executions: int
    retry_initial_delay_ms: int
    retry_max_delay_ms: int
    execution_timeout_ms: int | None
    max_unstarted_abandonments: int
    unstarted_initial_delay_ms: int
    unstarted_max_delay_ms: int
    generation: int
    executions: int
    unstarted_streak: int
    current_attempt_id: str | None
    worker_id: str | None
    lease_expires_at_ms: int | None
    created_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None
    last_error_code: str | None
    output: bytes | None
    history_seq: int
    cancel_requested: bool

    @classmethod
    def from_row(cls, row: Any) -> JobRecord:
        return cls.from_mapping(row._mapping)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> JobRecord:
        values = dict(mapping)
        values["state"] = JobState(values["state"])
        values["payload"] = bytes(values["payload"])
        if values["output"] is not None:
            values["output"] = bytes(values["output"])
        values["cancel_requested"] = bool(values["cancel_requested"])
        return cls(**{f.name: values[f.name] for f in fields(cls)})

    @property
    def settings(self) -> JobSettings:
        return JobSettings(
            max_executions=self.max_executions,
            retry_initial_delay_ms=self.retry_initial_delay_ms,
            retry_max_delay_ms=self.retry_max_delay_ms,
            execution_timeout_ms=self.execution_timeout_ms,
            max_unstarted_abandonments=self.max_unstarted_abandonments,
            unstarted_initial_delay_ms=self.unstarted_initial_delay_ms,
            unstarted_max_delay_ms=self.unstarted_max_delay_ms,
        )

    def view(self) -> JobView:
        return JobView(
            state=self.state,
            settings=self.settings,
            executions=self.executions,
            unstarted_streak=self.unstarted_streak,
            current_attempt_id=self.current_attempt_id,
            cancel_requested=self.cancel_requested,
            generation=self.generation,
        )


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    id: str
    job_id: str
    generation: int
    worker_id: str
    execution_number: int
    claimed_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    outcome: Outcome | None
    error_code: str | None
    exception_type: str | None
    message: str | None
    detail: str | None
    retry_delay_ms: int | None
    job_state_after: JobState | None
    reported: bool

    @classmethod
    def from_row(cls, row: Any) -> AttemptRecord:
        values = dict(row._mapping)
        if values["outcome"] is not None:
            values["outcome"] = Outcome(values["outcome"])
        if values["job_state_after"] is not None:
            values["job_state_after"] = JobState(values["job_state_after"])
        values["reported"] = bool(values["reported"])
        return cls(**{f.name: values[f.name] for f in fields(cls)})


def settings_columns(settings: JobSettings) -> dict[str, int | None]:
    """The job columns that hold ``settings``."""
    return {f.name: getattr(settings, f.name) for f in fields(settings)}
