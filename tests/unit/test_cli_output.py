"""The client commands' ``--json`` shapes: rebuilt from the SDK's values, they are what
protobuf's ``MessageToDict`` made of the wire messages (what the commands printed when
they called raw stubs), key order included."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.cli.output import attempt_json, audit_json, job_json, revealed_json, show_time, token_json
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


def same(mine: dict[str, Any], message: Message) -> None:
    expected = MessageToDict(message, preserving_proto_field_name=True)
    assert json.dumps(mine) == json.dumps(expected)


@pytest.mark.parametrize("message", [FULL_JOB, LISTED_JOB], ids=["full", "listed"])
def test_jobs_print_as_the_wire_job(message: job_pb2.Job) -> None:
    same(job_json(job_from_proto(message)), message)


@pytest.mark.parametrize(
    "message",
    [
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
        ),
        job_pb2.Attempt(id="a-2", job_id="j-1", generation=1, worker_id="w", claimed_at=at(5)),
        job_pb2.Attempt(
            id="a-3",
            job_id="j-1",
            generation=1,
            worker_id="w",
            outcome=job_pb2.OUTCOME_RELEASED,
            retry_delay=ms(0),
        ),
    ],
    ids=["finished", "in progress", "zero delay"],
)
def test_attempts_print_as_the_wire_attempt(message: job_pb2.Attempt) -> None:
    same(attempt_json(attempt_from_proto(message)), message)


def test_a_revealed_error_prints_as_the_wire_answer() -> None:
    full = job_service_pb2.RevealErrorResponse(
        attempt_id="a-1",
        job_id="j-1",
        generation=1,
        error_code="order_not_found",
        exception_type="worker_sdk._errors.PermanentJobFailure",
        message="Order o-77 does not exist.",
        detail="Traceback (most recent call last):\n  ...\n",
    )
    same(revealed_json(revealed_from_proto(full)), full)
    bare = job_service_pb2.RevealErrorResponse(attempt_id="a-2", job_id="j-1", generation=1)
    same(revealed_json(revealed_from_proto(bare)), bare)


def test_tokens_and_audit_events_print_as_the_wire_messages() -> None:
    valid = admin_service_pb2.Token(
        id="a" * 16, name="bootstrap-admin", scopes=["admin"], created_at=at(1_767_261_000_000)
    )
    revoked = admin_service_pb2.Token(
        id="b" * 16,
        name="ops",
        scopes=["enqueue", "manage", "read"],
        queues=["billing", "mail"],
        created_at=at(1_767_261_000_000),
        created_by="a" * 16,
        revoked_at=at(1_767_261_999_999),
    )
    for token in (valid, revoked):
        same(token_json(token_from_proto(token)), token)
    for event in (
        admin_service_pb2.AuditEvent(
            id=9_007_199_254_740_993,  # int64: a JSON string
            at=at(1_767_261_000_000),
            actor_token_id="b" * 16,
            actor_name="ops",
            action="job.cancel",
            target="j-1",
            peer="ipv4:127.0.0.1:50000",
            detail="state available",
        ),
        admin_service_pb2.AuditEvent(id=1, at=at(0), actor_name="coordinator", action="token.create"),
    ):
        same(audit_json(audit_event_from_proto(event)), event)


def test_times_for_people() -> None:
    moment = datetime(2026, 1, 1, 10, 0, 0, 7000, tzinfo=UTC)
    assert show_time(moment) == "2026-01-01T10:00:00.007+00:00"
    assert show_time(moment, "seconds") == "2026-01-01T10:00:00+00:00"
    assert show_time(None) == "1970-01-01T00:00:00.000+00:00"  # an unset wire time, as before
