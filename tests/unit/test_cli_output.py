"""The client commands' JSON: one shape per object, made from the SDK's values by one
rule (SDK names, every field present, lower-case enum values, RFC 3339 UTC times,
``*_s`` durations, payload and output as JSON or ``*_base64``), as docs/cli-json.md
says."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.cli.output import bytes_json, show_age, show_time, to_json
from tests.support import ROOT
from worker_sdk import QueueInfo, QueueRateInfo, WorkerInfo
from worker_sdk._convert import (
    attempt_from_proto,
    audit_event_from_proto,
    job_from_proto,
    revealed_from_proto,
    token_from_proto,
)
from worker_sdk.proto.runwick.v1 import admin_service_pb2, job_pb2, job_service_pb2


def at(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def ms(value: int) -> Duration:
    return Duration(seconds=value // 1000, nanos=(value % 1000) * 1_000_000)


def settings(*, timeout_ms: int | None) -> job_pb2.JobSettings:
    """Every effective value, as the coordinator sends them on a job."""
    message = job_pb2.JobSettings(
        max_executions=3,
        retry_initial_delay=ms(5_000),
        retry_max_delay=ms(61_500),
        max_unstarted_abandonments=5,
        unstarted_initial_delay=ms(1_000),
        unstarted_max_delay=ms(30_001),
    )
    if timeout_ms is None:
        message.no_execution_timeout = True
    else:
        message.execution_timeout.CopyFrom(ms(timeout_ms))
    return message


FULL_JOB = job_pb2.Job(
    id="0190a0b0-0000-7000-8000-000000000001",
    wire_name="billing.invoice",
    queue="late",
    payload=b'{"n": 1, "name": "\xc3\xa9"}',
    payload_version=2,
    priority=-3,
    state=job_pb2.JOB_STATE_RUNNING,
    run_at=at(1_767_261_600_000),
    idempotency_key="inv-1",
    settings=settings(timeout_ms=90_250),
    executions=2,
    unstarted_abandonments=1,
    generation=3,
    current_attempt_id="0190a0b0-0000-7000-8000-0000000000a1",
    lease_expires_at=at(1_767_261_660_123),
    created_at=at(1_767_261_000_007),
    updated_at=at(1_767_261_600_500),
    finished_at=at(1_767_261_700_000),
    last_error_code="timeout",
    output=b"\x00\x01binary",
    parent_ids=["p-1", "p-2"],
    cancel_requested=True,
)
LISTED_JOB = job_pb2.Job(  # as a list answers: no payload, no timeout, nothing optional
    id="0190a0b0-0000-7000-8000-000000000002",
    wire_name="mail.send",
    queue="default",
    payload_version=1,
    state=job_pb2.JOB_STATE_AVAILABLE,
    run_at=at(1_767_261_000_000),
    settings=settings(timeout_ms=None),
    generation=1,
    created_at=at(1_767_261_000_000),
    updated_at=at(1_767_261_000_000),
)


def test_one_job_shape_whatever_the_read() -> None:
    full = to_json(job_from_proto(FULL_JOB))
    listed = to_json(job_from_proto(LISTED_JOB))
    assert list(full) == list(listed)  # the same keys, in the same order
    assert full["state"] == "running" and listed["state"] == "available"
    assert full["payload"] == {"n": 1, "name": "é"} and full["payload_base64"] is None
    assert full["output"] is None and base64.b64decode(full["output_base64"]) == b"\x00\x01binary"
    assert listed["payload"] is None and listed["output"] is None  # lists carry neither
    assert full["run_at"] == "2026-01-01T10:00:00.000Z"
    assert full["settings"] == {
        "max_executions": 3,
        "retry_initial_delay_s": 5.0,
        "retry_max_delay_s": 61.5,
        "execution_timeout_s": 90.25,
        "max_unstarted_abandonments": 5,
        "unstarted_initial_delay_s": 1.0,
        "unstarted_max_delay_s": 30.001,
    }
    assert listed["settings"]["execution_timeout_s"] is None
    assert (full["idempotency_key"], listed["idempotency_key"]) == ("inv-1", None)
    assert full["parent_ids"] == ["p-1", "p-2"] and listed["child_ids"] == []
    json.dumps(full)  # plain JSON all the way down


def test_attempts_name_outcomes_and_delays_as_the_sdk_does() -> None:
    finished = to_json(
        attempt_from_proto(
            job_pb2.Attempt(
                id="a-1",
                job_id="j-1",
                generation=2,
                worker_id="host-1-abc",
                execution_number=1,
                claimed_at=at(1_767_261_000_001),
                started_at=at(1_767_261_000_050),
                finished_at=at(1_767_261_002_000),
                outcome=job_pb2.OUTCOME_RETRYABLE_FAILURE,
                error_code="boom",
                exception_type="builtins.ValueError",
                retry_delay=ms(4_321),
            )
        )
    )
    running = to_json(
        attempt_from_proto(job_pb2.Attempt(id="a-2", job_id="j-1", generation=1, worker_id="w"))
    )
    assert list(finished) == list(running)
    assert (finished["outcome"], finished["retry_delay_s"]) == ("retryable_failure", 4.321)
    assert (running["outcome"], running["retry_delay_s"], running["started_at"]) == (None, None, None)
    assert finished["claimed_at"] == "2026-01-01T09:50:00.001Z"


def test_tokens_events_and_revealed_errors_use_the_sdk_names() -> None:
    token = to_json(
        token_from_proto(
            admin_service_pb2.Token(
                id="b" * 16, name="ops", scopes=["read"], created_at=at(0), revoked_at=at(1_000)
            )
        )
    )
    assert token == {
        "id": "b" * 16,
        "name": "ops",
        "scopes": ["read"],
        "queues": [],
        "created_at": "1970-01-01T00:00:00.000Z",
        "created_by": None,
        "revoked_at": "1970-01-01T00:00:01.000Z",
    }
    event = to_json(
        audit_event_from_proto(
            admin_service_pb2.AuditEvent(id=9_007_199_254_740_993, at=at(0), actor_name="c", action="x")
        )
    )
    assert event["id"] == 9_007_199_254_740_993  # a JSON number, as the SDK's int
    revealed = to_json(
        revealed_from_proto(job_service_pb2.RevealErrorResponse(attempt_id="a", job_id="j", generation=1))
    )
    assert revealed["message"] == "" and revealed["error_code"] is None


def test_queues_and_workers_print_counts_by_state_and_times() -> None:
    from worker_sdk import JobState

    queue = to_json(QueueInfo("mail", False, 2, {JobState.AVAILABLE: 3}, timedelta(seconds=1.5)))
    assert queue == {
        "name": "mail",
        "paused": False,
        "concurrency_limit": 2,
        "counts": {"available": 3},
        "oldest_available_age_s": 1.5,
        "key_limit": None,
        "active_keys": None,
        "keys_at_limit": None,
        "rate": None,
        "keys_at_rate": None,
        "first_keys_at_limit": [],
        "first_keys_at_rate": [],
        "held_back": {},
        "runnable": None,
    }
    one_a_minute = QueueRateInfo(100, timedelta(minutes=1), per_key=True)
    rated = to_json(QueueInfo("api", False, None, rate=one_a_minute))
    assert rated["rate"] == {"count": 100, "period_s": 60.0, "per_key": True}
    worker = to_json(WorkerInfo("w-1", ("mail",), ("a.b",), 8, 2, 6, None, None))
    assert worker["queues"] == ["mail"] and worker["connected_at"] is None


def test_bytes_are_json_when_they_are_json() -> None:
    assert bytes_json(b'{"a": [1]}') == ({"a": [1]}, None)
    assert bytes_json(b"plain text") == (None, base64.b64encode(b"plain text").decode())
    assert bytes_json(b"\xff") == (None, "/w==")
    assert bytes_json(None) == (None, None)


def test_times_for_people() -> None:
    moment = datetime(2026, 1, 1, 10, 0, 0, 7000, tzinfo=UTC)
    assert show_time(moment) == "2026-01-01T10:00:00.007Z"
    assert show_time(moment, wide=False) == "2026-01-01 10:00:00Z"  # UTC, and it says so
    assert show_time(None) == "-"
    assert show_age(moment, moment + timedelta(minutes=5, seconds=3)) == "5m"
    assert show_age(moment, moment + timedelta(days=2)) == "2d"


def test_the_json_page_documents_every_command_that_prints_json() -> None:
    page = (ROOT / "docs" / "cli-json.md").read_text()
    for key in (
        "enqueued",
        "job",
        "jobs",
        "attempts",
        "next_page_token",
        "revealed",
        "workers",
        "queues",
        "tokens",
        "events",
        "schedules",
        "skipped_jobs",
        "payload_base64",
    ):
        assert f"`{key}`" in page or f'"{key}"' in page, key
