"""Rows to domain values and back: the only place that knows column names besides the
schema and the statements."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from typing import Any, TypeVar

from coordinator.domain.access import Scope, format_scopes
from coordinator.domain.evolve import draft_class
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

R = TypeVar("R")

JOB_FIELDS = tuple(f.name for f in fields(JobRecord))
_ATTEMPT_FIELDS = tuple(f.name for f in fields(AttemptRecord))
_QUEUE_FIELDS = tuple(f.name for f in fields(QueueRecord))
WRITTEN_JOB_FIELDS = tuple(name for name in JOB_FIELDS if name not in ("id", "history_seq", "updated_at_ms"))
"""Fields a change may set; the store itself keeps ``history_seq`` and ``updated_at_ms``."""


def job_from_row(row: Any) -> JobRecord:
    return _loader(JobRecord, JOB_FIELDS, _JOB_CONVERSIONS, tuple(row._fields))(row)


def jobs_from(result: Any) -> Iterator[JobRecord]:
    """The jobs of a result's rows (its columns named once, not row by row)."""
    load = _loader(JobRecord, JOB_FIELDS, _JOB_CONVERSIONS, tuple(result.keys()))
    return map(load, result)


def job_from_mapping(mapping: Mapping[str, Any]) -> JobRecord:
    """A job from its columns by name (the same conversions as a row's)."""
    load = _loader(JobRecord, JOB_FIELDS, _JOB_CONVERSIONS, JOB_FIELDS)
    return load(tuple(mapping[name] for name in JOB_FIELDS))


def job_row(job: JobRecord) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in JOB_FIELDS}
    row["state"] = job.state.value
    return row


def _changed_values_function() -> Callable[[JobRecord, JobRecord], dict[str, Any]]:
    # Straight-line code, one test a field: most fields of a copy are the very objects
    # of the record it was copied from, so ``is`` settles them without a comparison.
    # Keys come in ``WRITTEN_JOB_FIELDS`` order, so equal key sets are equal tuples.
    lines = ["def changed_values(before, after):", "    changed = {}"]
    for name in WRITTEN_JOB_FIELDS:
        lines += [
            f"    value = after.{name}",
            f"    if value is not before.{name} and value != before.{name}:",
            f"        changed['v_{name}'] = value",
        ]
    lines += [
        "    if 'v_state' in changed:",
        "        changed['v_state'] = after.state.value",
        "    return changed",
    ]
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # generated from the field names alone
    function: Callable[[JobRecord, JobRecord], dict[str, Any]] = namespace["changed_values"]
    return function


changed_values = _changed_values_function()
"""The columns ``after`` sets differently from ``before`` (the state as its text), each
keyed by the job update's parameter (``v_<column>``) and in ``WRITTEN_JOB_FIELDS``
order: the update's row as it is sent."""


def attempt_from_row(row: Any) -> AttemptRecord:
    return _loader(AttemptRecord, _ATTEMPT_FIELDS, _ATTEMPT_CONVERSIONS, tuple(row._fields))(row)


def attempts_from(result: Any) -> Iterator[AttemptRecord]:
    """The attempts of a result's rows (its columns named once, not row by row)."""
    load = _loader(AttemptRecord, _ATTEMPT_FIELDS, _ATTEMPT_CONVERSIONS, tuple(result.keys()))
    return map(load, result)


# -- loaders: a row to a record in one call -------------------------------------------
#
# Claims, starts and results read hundreds of job and attempt rows a batch. Going
# through ``row._mapping`` and keyword arguments costs more than the statement that
# read them, so each (record, column order) gets a loader generated once that takes
# the values by position and converts the few columns that need it.

_JOB_STATES = {state.value: state for state in JobState}
_OUTCOMES = {outcome.value: outcome for outcome in Outcome}
"""Enum members by stored value: an Enum's own call by value costs several times a dict
lookup, once per row (the database only holds values the store wrote)."""
_JOB_CONVERSIONS = {
    "state": "JOB_STATES[{}]",
    "payload": "bytes({})",
    "output": "(None if {0} is None else bytes({0}))",
    "cancel_requested": "bool({})",
}
_ATTEMPT_CONVERSIONS = {
    "outcome": "(None if {0} is None else OUTCOMES[{0}])",
    "job_state_after": "(None if {0} is None else JOB_STATES[{0}])",
    "reported": "bool({})",
}
_QUEUE_CONVERSIONS = {"paused": "bool({})", "keyed": "bool({})"}
_LOADERS: dict[tuple[type, tuple[str, ...]], Callable[[Any], Any]] = {}
_MAX_LOADERS = 256
"""Column orders are few (one per statement shape); the bound only guards the cache."""


def _loader(
    cls: type[R], names: tuple[str, ...], conversions: Mapping[str, str], columns: tuple[str, ...]
) -> Callable[[Any], R]:
    key = (cls, columns)
    loader = _LOADERS.get(key)
    if loader is None:
        position = {column: index for index, column in enumerate(columns)}
        missing = [name for name in names if name not in position]
        if missing:
            raise KeyError(f"the row lacks {cls.__name__} columns {missing}")
        # Records are frozen: their __init__ sets each field through object.__setattr__,
        # which on a 30-field job row cost more than reading it. The loader fills in the
        # record's draft and makes it the record, as ``domain.evolve`` copies (with the
        # same checks: slots, no __post_init__).
        values = [conversions.get(name, "{}").format(f"row[{position[name]}]") for name in names]
        lines = ["def load(row):", "    record = new(Draft)"]
        lines += [f"    record.{name} = {value}" for name, value in zip(names, values, strict=True)]
        lines += ["    record.__class__ = cls", "    return record"]
        namespace: dict[str, Any] = {
            "cls": cls,
            "Draft": draft_class(cls),
            "new": object.__new__,
            "JOB_STATES": _JOB_STATES,
            "OUTCOMES": _OUTCOMES,
        }
        exec("\n".join(lines), namespace)  # generated from the column names alone
        loader = namespace["load"]
        if len(_LOADERS) >= _MAX_LOADERS:
            _LOADERS.clear()
        _LOADERS[key] = loader
    return loader


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


def queues_from(result: Any) -> Iterator[QueueRecord]:
    """The queues of a result's rows (its columns named once, not row by row)."""
    return map(_loader(QueueRecord, _QUEUE_FIELDS, _QUEUE_CONVERSIONS, tuple(result.keys())), result)


def queue_from_row(row: Any) -> QueueRecord:
    return _loader(QueueRecord, _QUEUE_FIELDS, _QUEUE_CONVERSIONS, tuple(row._fields))(row)


def dependency_row(dependency: Dependency) -> dict[str, Any]:
    return {
        "child_id": dependency.child_id,
        "parent_id": dependency.parent_id,
        "satisfied": dependency.satisfied,
        "parent_output": dependency.parent_output,
        "parent_queue": dependency.parent_queue,
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
