"""Errors with machine-readable details (docs/limits.md): the coordinator builds one gRPC status
per error in ``api.errors`` (ErrorInfo reason and metadata, BadRequest field violations);
the SDK's single translation point reads them back into typed exceptions."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import grpc
import pytest

from coordinator.api.errors import (
    ERROR_DOMAIN,
    MAX_STATUS_MESSAGE_BYTES,
    rich_status,
    status_for,
    status_of,
)
from coordinator.errors import (
    CoordinatorError,
    FailedPrecondition,
    InvalidArgument,
    JobOutputTooLarge,
    NotFound,
    Unavailable,
)
from tests.support import ROOT
from worker_sdk import (
    ArgumentError,
    CoordinatorUnavailable,
    FieldViolation,
    JobNotFound,
    MessageTooLarge,
    PayloadTooLarge,
)
from worker_sdk import (
    CoordinatorError as SdkCoordinatorError,
)
from worker_sdk import FailedPrecondition as SdkFailedPrecondition
from worker_sdk._errors import translate_rpc_error


class FakeRpcError(grpc.RpcError):
    """What a failed call looks like to the SDK: code, details, trailing metadata."""

    def __init__(self, status: grpc.Status) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status.code

    def details(self) -> str:
        return str(self._status.details)

    def trailing_metadata(self) -> tuple[tuple[str, bytes | str], ...]:
        return tuple(self._status.trailing_metadata)


def _round_trip(error: CoordinatorError) -> Exception:
    return translate_rpc_error(FakeRpcError(status_of(error)))


def test_each_error_class_has_its_status_code_and_default_reason() -> None:
    assert status_for(InvalidArgument("f", "bad")) is grpc.StatusCode.INVALID_ARGUMENT
    assert status_for(JobOutputTooLarge("j", 2, 1)) is grpc.StatusCode.INVALID_ARGUMENT
    assert status_for(NotFound("gone")) is grpc.StatusCode.NOT_FOUND
    assert status_for(FailedPrecondition("no")) is grpc.StatusCode.FAILED_PRECONDITION
    assert status_for(Unavailable("down")) is grpc.StatusCode.UNAVAILABLE
    assert [
        e.reason for e in (InvalidArgument("f", "x"), NotFound(), FailedPrecondition(), Unavailable())
    ] == [
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "FAILED_PRECONDITION",
        "UNAVAILABLE",
    ]


def test_s5_invalid_argument_becomes_argument_error_with_field_violations_and_reason() -> None:
    error = InvalidArgument("payload", "too big; store a reference", index=3, reason="PAYLOAD_TOO_LARGE")

    translated = _round_trip(error)

    assert isinstance(translated, PayloadTooLarge) and isinstance(translated, ArgumentError)
    assert translated.status_code is grpc.StatusCode.INVALID_ARGUMENT
    assert translated.reason == "PAYLOAD_TOO_LARGE"
    assert translated.field_violations == (FieldViolation("jobs[3].payload", "too big; store a reference"),)
    assert translated.index == 3
    assert str(translated) == "jobs[3].payload: too big; store a reference"


def test_s5_payload_too_large_exposes_wire_name_size_and_limit() -> None:
    error = InvalidArgument(
        "payload",
        "big",
        index=0,
        reason="PAYLOAD_TOO_LARGE",
        metadata={"wire_name": "a.b", "size_bytes": 70_000, "limit_bytes": 65_536},
    )
    translated = _round_trip(error)
    assert isinstance(translated, PayloadTooLarge)
    assert (translated.wire_name, translated.size_bytes, translated.limit_bytes, translated.index) == (
        "a.b",
        70_000,
        65_536,
        0,
    )


@pytest.mark.parametrize(
    ("error", "kind", "reason"),
    [
        (
            NotFound("job x does not exist", reason="JOB_NOT_FOUND", metadata={"job_id": "x"}),
            JobNotFound,
            "JOB_NOT_FOUND",
        ),
        (FailedPrecondition("job x is running", reason="WRONG_STATE"), SdkFailedPrecondition, "WRONG_STATE"),
        (Unavailable("database error"), CoordinatorUnavailable, "UNAVAILABLE"),
    ],
)
def test_other_errors_keep_their_reason_and_metadata(
    error: CoordinatorError, kind: type, reason: str
) -> None:
    translated = _round_trip(error)
    assert isinstance(translated, kind)
    assert translated.reason == reason  # type: ignore[attr-defined]
    assert dict(translated.metadata) == error.metadata  # type: ignore[attr-defined]
    assert translated.field_violations == ()  # type: ignore[attr-defined]


def test_the_status_carries_error_info_in_the_runwick_domain() -> None:
    from google.rpc import error_details_pb2, status_pb2

    status = status_of(NotFound("gone", reason="JOB_NOT_FOUND", metadata={"job_id": "j"}))
    [(key, raw)] = status.trailing_metadata
    assert key == "grpc-status-details-bin"
    decoded = status_pb2.Status.FromString(raw)
    info = error_details_pb2.ErrorInfo()
    assert decoded.details[0].Unpack(info)
    assert (info.reason, info.domain, dict(info.metadata)) == ("JOB_NOT_FOUND", ERROR_DOMAIN, {"job_id": "j"})
    assert decoded.code == grpc.StatusCode.NOT_FOUND.value[0]


def test_status_messages_and_details_are_cut_to_fit_grpc_trailers() -> None:
    """Whatever a client sent (a megabyte name quoted in an error), the trailer stays
    far below gRPC's 8 KiB metadata limit."""
    huge = "é" * 1_000_000
    status = rich_status(
        grpc.StatusCode.INVALID_ARGUMENT,
        huge,
        "NAME_TOO_LONG",
        {f"k{n}": huge for n in range(100)},
        [(huge, huge)],
    )
    assert len(status.details.encode()) <= MAX_STATUS_MESSAGE_BYTES
    [(_, raw)] = status.trailing_metadata
    on_the_wire = len(base64.b64encode(raw)) + 3 * len(status.details.encode())  # %-encoded message
    assert on_the_wire < 6 * 1024


def test_a_status_without_or_with_broken_details_still_translates() -> None:
    class Plain(FakeRpcError):
        def trailing_metadata(self) -> tuple[tuple[str, bytes | str], ...]:
            return (("grpc-status-details-bin", b"\xff\x00garbage"),)

    bare = grpc.Status()
    bare.code, bare.details, bare.trailing_metadata = grpc.StatusCode.INVALID_ARGUMENT, "bad", ()  # type: ignore[misc]
    translated = translate_rpc_error(Plain(bare))
    assert isinstance(translated, ArgumentError)
    assert (str(translated), translated.reason, translated.field_violations) == ("bad", None, ())


def test_resource_exhausted_becomes_message_too_large_with_advice() -> None:
    bare = grpc.Status()
    bare.code, bare.details, bare.trailing_metadata = (  # type: ignore[misc]
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Received message larger than max (50000000 vs. 39394304)",
        (),
    )
    translated = translate_rpc_error(FakeRpcError(bare))
    assert isinstance(translated, MessageTooLarge) and isinstance(translated, SdkCoordinatorError)
    assert "reference" in str(translated) and "50000000" in str(translated)


def test_the_sdk_reads_details_without_grpcio_status() -> None:
    """The SDK parses the trailer with googleapis-common-protos (a base dependency);
    grpcio-status stays a coordinator dependency."""
    code = (
        "import sys, worker_sdk, worker_sdk._errors; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc_status', 'coordinator')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"
