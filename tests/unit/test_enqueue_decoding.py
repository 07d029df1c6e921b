"""An enqueue's jobs decoded from the wire (``api.convert.new_job_spec``) and checked into
records (``JobsService._new_job``): both fill in their records field by field on the hot
path, so each must give exactly what keyword construction gives, for every field."""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.api.convert import new_job_spec, settings_layer
from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import DEFAULT_QUEUE, JobRecord, NewJobSpec
from coordinator.domain.settings import SettingsLayer
from coordinator.domain.states import JobState
from coordinator.errors import InvalidArgument
from coordinator.service.jobs import JobsService
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2

PARENT = "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f"
CHOSEN = "0193a7c2-5b1e-7c3d-9f00-ffffffffffff"


def test_a_job_with_every_field_set_decodes_as_keyword_construction_gives() -> None:
    message = job_service_pb2.NewJob(
        wire_name="mail.send",
        payload=b'{"to":"a"}',
        queue="mail",
        payload_version=3,
        priority=-7,
        run_at=Timestamp(seconds=1_800_000_000, nanos=5_000_000),
        idempotency_key="order-1",
        settings=job_pb2.JobSettings(max_executions=4, retry_initial_delay=Duration(seconds=2)),
        parent_ids=[PARENT],
        id=CHOSEN,
        unique_key="user-9",
    )
    decoded = new_job_spec(message, 0)
    expected = NewJobSpec(
        wire_name="mail.send",
        payload=b'{"to":"a"}',
        queue="mail",
        payload_version=3,
        priority=-7,
        run_at_ms=1_800_000_000_005,
        idempotency_key="order-1",
        settings=SettingsLayer(max_executions=4, retry_initial_delay_ms=2_000),
        parent_ids=(PARENT,),
        job_id=CHOSEN,
        unique_key="user-9",
    )
    assert type(decoded) is NewJobSpec
    assert decoded == expected and hash(decoded) == hash(expected)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.queue = "other"  # type: ignore[misc]


def test_a_job_with_nothing_but_its_name_and_payload_gets_every_default() -> None:
    decoded = new_job_spec(job_service_pb2.NewJob(wire_name="w", payload=b"{}"), 0)
    assert decoded == NewJobSpec(wire_name="w", payload=b"{}", payload_version=0)
    assert decoded.queue == DEFAULT_QUEUE and decoded.settings == SettingsLayer()


def test_settings_left_unset_inherit_and_those_set_are_read() -> None:
    assert settings_layer(job_pb2.JobSettings(), 0) == SettingsLayer()
    assert settings_layer(job_pb2.JobSettings(no_execution_timeout=True), 0) == SettingsLayer(
        clear_execution_timeout=True
    )
    assert settings_layer(job_pb2.JobSettings(unstarted_max_delay=Duration(seconds=9)), 0) == SettingsLayer(
        unstarted_max_delay_ms=9_000
    )


def test_a_bad_setting_or_run_at_names_its_job() -> None:
    with pytest.raises(InvalidArgument) as bad_delay:
        new_job_spec(
            job_service_pb2.NewJob(
                wire_name="w", payload=b"{}", settings=job_pb2.JobSettings(retry_max_delay=Duration(nanos=1))
            ),
            4,
        )
    assert "settings.retry_max_delay" in str(bad_delay.value) and bad_delay.value.index == 4
    with pytest.raises(InvalidArgument) as bad_time:
        new_job_spec(job_service_pb2.NewJob(wire_name="w", payload=b"{}", run_at=Timestamp(nanos=-1)), 2)
    assert "run_at" in str(bad_time.value) and bad_time.value.index == 2


def _service(clock: FakeClock) -> JobsService:
    store = SimpleNamespace(bounds=StoreBounds())  # _new_job reads the bounds alone
    return JobsService(store, clock, CoordinatorConfig(), random.Random(1))  # type: ignore[arg-type]


def test_a_checked_job_is_the_record_keyword_construction_gives() -> None:
    clock = FakeClock()
    now = clock.now_ms()
    spec = NewJobSpec(
        wire_name="mail.send",
        payload=b"{}",
        queue="mail",
        payload_version=2,
        priority=5,
        run_at_ms=now + 1_000,
        idempotency_key="order-1",
        settings=SettingsLayer(max_executions=7, execution_timeout_ms=30_000),
        job_id=CHOSEN,
        unique_key="user-9",
    )
    new = _service(clock)._new_job(0, spec, now)
    expected = JobRecord(
        id=CHOSEN,
        wire_name="mail.send",
        queue="mail",
        state=JobState.SCHEDULED,
        priority=5,
        run_at_ms=now + 1_000,
        payload=b"{}",
        payload_version=2,
        idempotency_key="order-1",
        max_executions=7,
        retry_initial_delay_ms=5_000,
        retry_max_delay_ms=60_000,
        execution_timeout_ms=30_000,
        max_unstarted_abandonments=5,
        unstarted_initial_delay_ms=1_000,
        unstarted_max_delay_ms=30_000,
        generation=1,
        executions=0,
        unstarted_streak=0,
        current_attempt_id=None,
        worker_id=None,
        lease_expires_at_ms=None,
        created_at_ms=now,
        updated_at_ms=now,
        finished_at_ms=None,
        last_error_code=None,
        output=None,
        history_seq=1,
        cancel_requested=False,
        unique_key="user-9",
    )
    assert type(new.record) is JobRecord
    assert new.record == expected and hash(new.record) == hash(expected)
    assert new.chosen_id and new.parent_ids == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.record.state = JobState.RUNNING  # type: ignore[misc]


def test_a_job_due_now_is_available_under_an_id_the_coordinator_chose() -> None:
    clock = FakeClock()
    now = clock.now_ms()
    new = _service(clock)._new_job(0, NewJobSpec(wire_name="w", payload=b"{}"), now)
    assert new.record.state is JobState.AVAILABLE and new.record.run_at_ms == now
    assert not new.chosen_id and len(new.record.id) == 36
    assert new.record.execution_timeout_ms is None and new.record.unique_key is None
