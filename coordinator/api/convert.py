"""Conversions between domain values and protobuf messages."""

from __future__ import annotations

from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.domain.evolve import draft_class
from coordinator.domain.progress import Progress
from coordinator.domain.records import DEFAULT_QUEUE, AttemptRecord, JobRecord, NewJobSpec, Relatives
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState, Outcome
from coordinator.errors import InvalidArgument
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2

NANOS_PER_MS = 1_000_000
NANOS_PER_SECOND = 1_000_000_000
MAX_DURATION_SECONDS = 315_576_000_000
"""google.protobuf.Duration's documented range: about 10,000 years."""
MIN_TIMESTAMP_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z

_STATE_TO_PB = {state: job_pb2.JobState.Value(f"JOB_STATE_{state.name}") for state in JobState}
_PB_TO_STATE = {value: state for state, value in _STATE_TO_PB.items()}
_OUTCOME_TO_PB = {outcome: job_pb2.Outcome.Value(f"OUTCOME_{outcome.name}") for outcome in Outcome}
PB_TO_OUTCOME = {value: outcome for outcome, value in _OUTCOME_TO_PB.items()}


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def set_timestamp(target: Timestamp, ms: int) -> None:
    """Sets a message's Timestamp field in place (assigning a built one would copy it)."""
    target.seconds = ms // 1000
    target.nanos = (ms % 1000) * 1_000_000


def duration(ms: int) -> Duration:
    # Duration needs seconds and nanos of the same sign.
    seconds = int(ms / 1000)
    return Duration(seconds=seconds, nanos=(ms - seconds * 1000) * 1_000_000)


def duration_ms(value: Duration, field: str, *, index: int | None = None) -> int:
    """Whole milliseconds of a Duration; rejects invalid Durations and sub-millisecond
    precision (settings, leases and timeouts are whole milliseconds)."""
    seconds, nanos = value.seconds, value.nanos
    if (
        abs(seconds) > MAX_DURATION_SECONDS
        or abs(nanos) >= NANOS_PER_SECOND
        or (seconds > 0 > nanos)
        or (seconds < 0 < nanos)
    ):
        raise InvalidArgument(
            field,
            f"is not a valid Duration (seconds={seconds}, nanos={nanos}): seconds within "
            "±315,576,000,000, nanos within ±999,999,999 and of the same sign",
            index=index,
            reason="INVALID_DURATION",
        )
    if nanos % NANOS_PER_MS:
        raise InvalidArgument(
            field,
            f"must be a whole number of milliseconds, got {seconds} s {nanos} ns",
            index=index,
            reason="INVALID_DURATION",
        )
    return seconds * 1000 + nanos // NANOS_PER_MS


def timestamp_ms(value: Timestamp, field: str = "timestamp", *, index: int | None = None) -> int:
    """Milliseconds since the epoch; rejects Timestamps outside years 1-9999."""
    if not MIN_TIMESTAMP_SECONDS <= value.seconds <= MAX_TIMESTAMP_SECONDS or not (
        0 <= value.nanos < NANOS_PER_SECOND
    ):
        raise InvalidArgument(
            field,
            f"is not a valid Timestamp (seconds={value.seconds}, nanos={value.nanos}): it must lie "
            "in 0001-01-01..9999-12-31 with nanos 0..999,999,999",
            index=index,
            reason="INVALID_TIMESTAMP",
        )
    return value.seconds * 1000 + value.nanos // NANOS_PER_MS


def state_to_pb(state: JobState) -> int:
    return _STATE_TO_PB[state]


def state_from_pb(value: int, field: str) -> JobState | None:
    """None for UNSPECIFIED (no filter); InvalidArgument for values this server doesn't know."""
    if value == job_pb2.JOB_STATE_UNSPECIFIED:
        return None
    if value not in _PB_TO_STATE:
        raise InvalidArgument(
            field, f"unknown job state {value}; leave it unset or use a JobState value", reason="UNKNOWN_ENUM"
        )
    return _PB_TO_STATE[value]


_INHERIT_ALL = SettingsLayer()
"""The layer of a job whose client set no settings (most of them): every field inherits."""


def settings_layer(settings: job_pb2.JobSettings, index: int) -> SettingsLayer:
    """The client's merged attribute+fluent level; unset fields inherit (R-3)."""
    if not settings.ListFields():
        return _INHERIT_ALL

    def ms(name: str) -> int | None:
        if not settings.HasField(name):
            return None
        return duration_ms(getattr(settings, name), f"settings.{name}", index=index)

    return SettingsLayer(
        max_executions=settings.max_executions if settings.HasField("max_executions") else None,
        retry_initial_delay_ms=ms("retry_initial_delay"),
        retry_max_delay_ms=ms("retry_max_delay"),
        execution_timeout_ms=ms("execution_timeout"),
        clear_execution_timeout=settings.no_execution_timeout,
        max_unstarted_abandonments=(
            settings.max_unstarted_abandonments if settings.HasField("max_unstarted_abandonments") else None
        ),
        unstarted_initial_delay_ms=ms("unstarted_initial_delay"),
        unstarted_max_delay_ms=ms("unstarted_max_delay"),
    )


_NewJobSpecDraft = draft_class(NewJobSpec)


def new_job_spec(job: job_service_pb2.NewJob, index: int) -> NewJobSpec:
    """One job of an enqueue request, decoded. Filled in as the record's draft and then
    made the record (as ``domain.evolve`` copies): the frozen dataclass's ``__init__`` sets
    each of its eleven fields through ``object.__setattr__``, which cost as much as the
    rest of the decoding of a 500-job request."""
    spec: Any = object.__new__(_NewJobSpecDraft)
    spec.wire_name = job.wire_name
    spec.payload = job.payload
    spec.queue = job.queue or DEFAULT_QUEUE
    spec.payload_version = job.payload_version
    spec.priority = job.priority
    spec.run_at_ms = timestamp_ms(job.run_at, "run_at", index=index) if job.HasField("run_at") else None
    spec.idempotency_key = job.idempotency_key or None
    spec.settings = settings_layer(job.settings, index)
    spec.parent_ids = tuple(job.parent_ids) if job.parent_ids else ()
    spec.job_id = job.id or None
    spec.unique_key = job.unique_key or None
    if job.HasField("trace_context"):
        spec.traceparent = job.trace_context.traceparent
        spec.tracestate = job.trace_context.tracestate or None
    else:
        spec.traceparent = spec.tracestate = None
    spec.concurrency_key = job.concurrency_key
    spec.__class__ = NewJobSpec
    result: NewJobSpec = spec
    return result


def job_to_pb(
    job: JobRecord, *, include_blobs: bool = True, relatives: Relatives | None = None
) -> job_pb2.Job:
    settings = job_pb2.JobSettings(
        max_executions=job.max_executions,
        retry_initial_delay=duration(job.retry_initial_delay_ms),
        retry_max_delay=duration(job.retry_max_delay_ms),
        max_unstarted_abandonments=job.max_unstarted_abandonments,
        unstarted_initial_delay=duration(job.unstarted_initial_delay_ms),
        unstarted_max_delay=duration(job.unstarted_max_delay_ms),
    )
    if job.execution_timeout_ms is not None:
        settings.execution_timeout.CopyFrom(duration(job.execution_timeout_ms))
    else:
        settings.no_execution_timeout = True
    message = job_pb2.Job(
        id=job.id,
        wire_name=job.wire_name,
        queue=job.queue,
        payload_version=job.payload_version,
        priority=job.priority,
        state=state_to_pb(job.state),  # type: ignore[arg-type]
        run_at=timestamp(job.run_at_ms),
        idempotency_key=job.idempotency_key or "",
        settings=settings,
        executions=job.executions,
        unstarted_abandonments=job.unstarted_streak,
        generation=job.generation,
        current_attempt_id=job.current_attempt_id or "",
        created_at=timestamp(job.created_at_ms),
        updated_at=timestamp(job.updated_at_ms),
        last_error_code=job.last_error_code or "",
        cancel_requested=job.cancel_requested,
        concurrency_key=job.concurrency_key,
    )
    if include_blobs:
        message.payload = job.payload
        if job.output is not None:
            message.output = job.output
    if job.lease_expires_at_ms is not None:
        message.lease_expires_at.CopyFrom(timestamp(job.lease_expires_at_ms))
    if job.finished_at_ms is not None:
        message.finished_at.CopyFrom(timestamp(job.finished_at_ms))
    if job.traceparent is not None:
        message.trace_context.traceparent = job.traceparent
        message.trace_context.tracestate = job.tracestate or ""
    if relatives is not None:
        message.parent_ids.extend(relatives.parent_ids)
        message.child_ids.extend(relatives.child_ids)
    return message


def progress_to_pb(progress: Progress) -> job_pb2.Progress:
    message = job_pb2.Progress(done=progress.done, message=progress.message)
    if progress.total is not None:
        message.total = progress.total
    return message


def attempt_to_pb(attempt: AttemptRecord) -> job_pb2.Attempt:
    """Code and exception type only: message and full text need a reveal (R-22)."""
    message = job_pb2.Attempt(
        id=attempt.id,
        job_id=attempt.job_id,
        generation=attempt.generation,
        worker_id=attempt.worker_id,
        execution_number=attempt.execution_number,
        claimed_at=timestamp(attempt.claimed_at_ms),
        error_code=attempt.error_code or "",
        exception_type=attempt.exception_type or "",
    )
    if attempt.outcome is not None:
        message.outcome = _OUTCOME_TO_PB[attempt.outcome]  # type: ignore[assignment]
    if attempt.started_at_ms is not None:
        message.started_at.CopyFrom(timestamp(attempt.started_at_ms))
    if attempt.finished_at_ms is not None:
        message.finished_at.CopyFrom(timestamp(attempt.finished_at_ms))
    if attempt.retry_delay_ms is not None:
        message.retry_delay.CopyFrom(duration(attempt.retry_delay_ms))
    return message
