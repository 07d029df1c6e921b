"""``evolve`` (records copied with changes) and the store's generated row loaders: the
hot path's replacements for ``dataclasses.replace`` and keyword construction must give
exactly what those give, for every record of the hot path and every field."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
from domain_doubles import ATTEMPT_RECORD as ATTEMPT
from domain_doubles import JOB_RECORD as JOB

from coordinator.domain.evolve import evolve
from coordinator.domain.records import AttemptRecord, JobRecord, WorkerIdentity
from coordinator.domain.states import JobState, Outcome
from coordinator.service.work import Claimed
from coordinator.store.rows import (
    WRITTEN_JOB_FIELDS,
    attempt_from_row,
    changed_values,
    job_from_row,
    job_row,
)


def test_evolve_changes_what_is_named_and_copies_the_rest() -> None:
    running = evolve(JOB, state=JobState.RUNNING, executions=1, worker_id=None)
    assert running == dataclasses.replace(JOB, state=JobState.RUNNING, executions=1, worker_id=None)
    assert running.state is JobState.RUNNING and running.executions == 1
    assert JOB.state is JobState.AVAILABLE  # the original is untouched
    assert hash(running) == hash(dataclasses.replace(JOB, state=JobState.RUNNING, executions=1))


@pytest.mark.parametrize("record", [JOB, ATTEMPT], ids=["JobRecord", "AttemptRecord"])
def test_evolve_sets_every_field_like_replace(record: Any) -> None:
    for field in dataclasses.fields(record):
        value = _other_value(getattr(record, field.name))
        assert evolve(record, **{field.name: value}) == dataclasses.replace(record, **{field.name: value})


def test_evolve_without_changes_is_an_equal_copy() -> None:
    copy = evolve(ATTEMPT)
    assert copy == ATTEMPT and copy is not ATTEMPT


def test_an_evolved_record_stays_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolve(JOB, priority=1).priority = 2  # type: ignore[misc]


def test_evolve_refuses_a_name_that_is_no_field() -> None:
    with pytest.raises(TypeError, match="JobRecord has no field 'stat'"):
        evolve(JOB, stat=JobState.RUNNING)


def test_evolve_handles_records_of_one_field_and_nested_ones() -> None:
    claimed = Claimed(JOB, ATTEMPT.id, 5_000)
    with_outputs = evolve(claimed, parent_outputs={"p": b"out"})
    assert with_outputs == dataclasses.replace(claimed, parent_outputs={"p": b"out"})
    identity = WorkerIdentity("w", None, None)
    assert evolve(identity, worker_id="v") == dataclasses.replace(identity, worker_id="v")

    @dataclasses.dataclass(frozen=True, slots=True)
    class One:
        a: int

    assert evolve(One(1), a=2) == One(2)
    assert evolve(One(1)) == One(1)


def test_evolve_refuses_classes_it_would_copy_wrongly() -> None:
    @dataclasses.dataclass(frozen=True)
    class Unslotted:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    @dataclasses.dataclass(frozen=True, slots=True)
    class Derived(_Base):
        b: int

    with pytest.raises(TypeError, match="slotted"):
        evolve(Unslotted(1), a=2)
    with pytest.raises(TypeError, match="__post_init__"):
        evolve(Checked(1), a=-1)
    with pytest.raises(TypeError, match="its only slots"):
        evolve(Derived(1, 2), b=3)  # the draft would lack the base's slot


@dataclasses.dataclass(frozen=True, slots=True)
class _Base:
    a: int


def test_copies_and_loaded_rows_are_of_the_record_class_itself() -> None:
    """They are filled in as drafts and then become records: nothing of the draft
    class may remain visible."""
    values = _stored_job(JOB)
    made = [
        (evolve(JOB, priority=9), JobRecord),
        (evolve(ATTEMPT), AttemptRecord),
        (job_from_row(_Row.of(values, list(values))), JobRecord),
    ]
    for record, cls in made:
        assert type(record) is cls
        built = cls(**{field.name: getattr(record, field.name) for field in dataclasses.fields(cls)})
        assert record == built and hash(record) == hash(built)


class _Row(tuple[Any, ...]):
    """A result row as SQLAlchemy gives it: values by position, and ``_fields``."""

    _fields: tuple[str, ...]

    @classmethod
    def of(cls, values: dict[str, Any], order: Sequence[str]) -> _Row:
        row = cls(values[name] for name in order)
        row._fields = tuple(order)
        return row


def _stored_job(job: JobRecord) -> dict[str, Any]:
    """The columns as a driver returns them: text states, integer flags, memoryview blobs."""
    values = job_row(job)
    values.update(
        payload=memoryview(job.payload),
        output=None if job.output is None else memoryview(job.output),
        cancel_requested=int(job.cancel_requested),
    )
    return values


@pytest.mark.parametrize("reverse", [False, True], ids=["schema order", "other order"])
def test_a_job_row_loads_as_the_record_it_stores(reverse: bool) -> None:
    ended = evolve(JOB, state=JobState.SUCCEEDED, output=b"42", cancel_requested=True, finished_at_ms=7)
    for job in (JOB, ended):
        values = _stored_job(job)
        order = sorted(values, reverse=reverse)
        loaded = job_from_row(_Row.of(values, order))
        assert loaded == job
        assert type(loaded.payload) is bytes and loaded.state is job.state


def test_a_loaded_record_is_frozen_and_hashes_as_one_built_by_its_init() -> None:
    values = _stored_job(JOB)
    loaded = job_from_row(_Row.of(values, list(values)))
    assert hash(loaded) == hash(JOB) and loaded == JOB
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.state = JobState.RUNNING  # type: ignore[misc]


def test_an_attempt_row_loads_with_its_enums_and_flags() -> None:
    ended = evolve(
        ATTEMPT,
        outcome=Outcome.RETRYABLE_FAILURE,
        job_state_after=JobState.SCHEDULED,
        reported=True,
        started_at_ms=1_200,
    )
    for attempt in (ATTEMPT, ended):
        values = {f.name: getattr(attempt, f.name) for f in dataclasses.fields(attempt)}
        values.update(
            outcome=None if attempt.outcome is None else attempt.outcome.value,
            job_state_after=None if attempt.job_state_after is None else attempt.job_state_after.value,
            reported=int(attempt.reported),
        )
        assert attempt_from_row(_Row.of(values, list(values))) == attempt


def test_a_row_without_a_records_column_is_refused_by_name() -> None:
    values = _stored_job(JOB)
    del values["history_seq"]
    with pytest.raises(KeyError, match="history_seq"):
        job_from_row(_Row.of(values, list(values)))


def _other_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, JobState):
        return JobState.FAILED if value is not JobState.FAILED else JobState.RUNNING
    if isinstance(value, bytes):
        return value + b"!"
    if isinstance(value, str):
        return value + "-changed"
    return "set"  # a None field: any value does


@pytest.mark.parametrize("name", WRITTEN_JOB_FIELDS)
def test_changed_values_name_each_written_field_that_differs(name: str) -> None:
    value = _other_value(getattr(JOB, name))
    expected = value.value if isinstance(value, JobState) else value
    assert changed_values(JOB, evolve(JOB, **{name: value})) == {f"v_{name}": expected}


def test_changed_values_ignore_equal_values_and_the_fields_the_store_keeps() -> None:
    equal = evolve(JOB, payload=bytes(bytearray(JOB.payload)), queue="".join(JOB.queue))
    assert equal.payload is not JOB.payload
    assert changed_values(JOB, equal) == {}
    assert changed_values(JOB, evolve(JOB, history_seq=9, updated_at_ms=9)) == {}


def test_changed_values_come_in_field_order_whatever_order_the_copy_named_them() -> None:
    after = evolve(JOB, worker_id="w-2", state=JobState.RUNNING, priority=JOB.priority + 1)
    values = changed_values(JOB, after)
    assert values == {"v_state": "running", "v_priority": JOB.priority + 1, "v_worker_id": "w-2"}
    # Field order, so equal column sets make one statement.
    assert list(values) == [f"v_{name}" for name in WRITTEN_JOB_FIELDS if f"v_{name}" in values]
