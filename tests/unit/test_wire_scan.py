"""The raw protobuf scan (``coordinator.api.wire``) and the request limits built on it
(``coordinator.api.ingress``): counts agree with the parser, stop at the limit, and no
bytes make the scan fail other than with WireError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.api.ingress import (
    MAX_OTHER_FIELDS,
    SMALL_REQUEST_BYTES,
    RequestLimit,
    refusing_deserializer,
    request_limits,
)
from coordinator.api.wire import OTHER_FIELDS, WireError, count_fields, field_values, sole_field
from coordinator.domain.bounds import STREAM_BOUNDS, StoreBounds
from coordinator.validation import MAX_TOKEN_QUEUES
from worker_sdk.proto.runwick.v1 import admin_service_pb2, job_service_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as wpb

ENQUEUE = "/runwick.v1.JobService/Enqueue"
new_jobs = st.builds(
    job_service_pb2.NewJob,
    wire_name=st.text(max_size=8),
    payload=st.binary(max_size=64),
    priority=st.integers(-(2**31), 2**31 - 1),
    parent_ids=st.lists(st.text(max_size=4), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(jobs=st.lists(new_jobs, max_size=40), limit=st.integers(0, 50))
def test_the_count_of_jobs_is_the_parsed_count_up_to_the_limit(
    jobs: list[job_service_pb2.NewJob], limit: int
) -> None:
    data = job_service_pb2.EnqueueRequest(jobs=jobs).SerializeToString()
    parsed = len(job_service_pb2.EnqueueRequest.FromString(data).jobs)
    counts = count_fields(data, {1: limit, OTHER_FIELDS: 0})
    assert counts[1] == min(parsed, limit + 1)
    assert counts[OTHER_FIELDS] == 0


@settings(max_examples=200, deadline=None)
@given(
    scopes=st.lists(st.text(max_size=6), max_size=20),
    queues=st.lists(st.text(max_size=6), max_size=20),
    name=st.text(max_size=10),
)
def test_counts_of_several_fields_match_the_parser(scopes: list[str], queues: list[str], name: str) -> None:
    data = admin_service_pb2.CreateTokenRequest(name=name, scopes=scopes, queues=queues).SerializeToString()
    parsed = admin_service_pb2.CreateTokenRequest.FromString(data)
    counts = count_fields(data, {2: 100, 3: 100, OTHER_FIELDS: 100})
    assert (counts[2], counts[3]) == (len(parsed.scopes), len(parsed.queues))
    assert counts[OTHER_FIELDS] == (1 if name else 0)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_counted_or_refused_with_wire_error(data: bytes) -> None:
    try:
        counts = count_fields(data, {1: 10, OTHER_FIELDS: 10})
    except WireError:
        return
    assert 0 <= counts[1] <= 11


def test_the_scan_stops_just_past_the_limit() -> None:
    """Five million jobs: the count stops at limit + 1 (a full scan would take seconds)."""
    counts = count_fields(b"\x0a\x00" * 5_000_000, {1: 500, OTHER_FIELDS: 0})
    assert counts[1] == 501


@pytest.mark.parametrize(
    "data",
    [b"\x0a\x05abc", b"\x08\xff\xff", b"\x0b\x0c", b"\x00\x00", b"\x09\x01\x02", b"\x0f"],
    ids=["truncated value", "truncated varint", "group", "field 0", "truncated fixed64", "wire type 7"],
)
def test_bytes_that_are_no_message_raise_wire_error(data: bytes) -> None:
    with pytest.raises(WireError):
        count_fields(data, {1: 10, OTHER_FIELDS: 10})


def test_field_values_yields_each_occurrence_and_bounds_the_fields_read() -> None:
    data = wpb.ConnectRequest(hello=wpb.Hello(queues=["a", "b"])).SerializeToString() * 3
    values = list(field_values(data, 1, max_fields=10))
    assert len(values) == 3
    assert list(wpb.Hello.FromString(bytes(values[0])).queues) == ["a", "b"]
    with pytest.raises(WireError):
        list(field_values(b"\x10\x00" * 11, 1, max_fields=10))


# -- the request limits ----------------------------------------------------------------------


def _deserialize(method: str, data: bytes, parse: object = None) -> object:
    limits = request_limits(StoreBounds(), StoreBounds().max_message_bytes())
    limit = limits.get(method, RequestLimit(SMALL_REQUEST_BYTES))
    return refusing_deserializer(limit, parse)(data)  # type: ignore[arg-type]


def _refusal(result: object) -> tuple[str, str]:
    error = result.error  # type: ignore[attr-defined]
    return type(error).__name__, error.reason


def test_an_enqueue_over_the_batch_bound_is_refused_unparsed() -> None:
    def never(data: bytes) -> None:
        raise AssertionError("parsed")

    assert _refusal(_deserialize(ENQUEUE, b"\x0a\x00" * 501, never)) == ("InvalidArgument", "BATCH_TOO_LARGE")
    assert _refusal(_deserialize(ENQUEUE, b"\x10\x00" * (MAX_OTHER_FIELDS + 1), never)) == (
        "InvalidArgument",
        "TOO_MANY_FIELDS",
    )
    assert _refusal(_deserialize(ENQUEUE, b"\x0a\x05ab", never)) == ("InvalidArgument", "MALFORMED_MESSAGE")


def test_a_full_batch_passes_to_the_parser() -> None:
    data = job_service_pb2.EnqueueRequest(jobs=[job_service_pb2.NewJob()] * 500).SerializeToString()
    parsed = _deserialize(ENQUEUE, data, job_service_pb2.EnqueueRequest.FromString)
    assert len(parsed.jobs) == 500  # type: ignore[attr-defined]


def test_every_other_method_takes_64_kib() -> None:
    assert _deserialize("/runwick.v1.JobService/GetJob", b"\x0a\x00" * (SMALL_REQUEST_BYTES // 2)) is not None
    refused = _deserialize("/runwick.v1.JobService/GetJob", b"x" * (SMALL_REQUEST_BYTES + 1))
    assert _refusal(refused) == ("ResourceExhausted", "REQUEST_TOO_LARGE")


def test_a_token_request_fits_its_most_queues_and_no_more() -> None:
    method = "/runwick.v1.AdminService/CreateToken"
    longest = "\u4e00" * 128  # 128 UTF-16 units of 3 UTF-8 bytes: the longest queue name
    most = admin_service_pb2.CreateTokenRequest(
        name="n" * 128, scopes=["work"], queues=[longest] * MAX_TOKEN_QUEUES
    )
    parsed = _deserialize(method, most.SerializeToString(), admin_service_pb2.CreateTokenRequest.FromString)
    assert len(parsed.queues) == MAX_TOKEN_QUEUES  # type: ignore[attr-defined]
    over = admin_service_pb2.CreateTokenRequest(queues=["q"] * (MAX_TOKEN_QUEUES + 1)).SerializeToString()
    assert _refusal(_deserialize(method, over)) == ("InvalidArgument", "OUT_OF_RANGE")


def test_hello_names_are_counted_over_every_hello_field() -> None:
    method = "/runwick.v1.WorkerService/Connect"
    queues, wire_names = STREAM_BOUNDS.max_hello_queues, STREAM_BOUNDS.max_hello_wire_names
    half = wpb.ConnectRequest(hello=wpb.Hello(queues=["q"] * (queues // 2 + 1))).SerializeToString()
    assert _refusal(_deserialize(method, half * 2)) == ("InvalidArgument", "OUT_OF_RANGE")
    half = wpb.ConnectRequest(hello=wpb.Hello(wire_names=["w"] * (wire_names // 2 + 1))).SerializeToString()
    assert _refusal(_deserialize(method, half * 2)) == ("InvalidArgument", "OUT_OF_RANGE")
    fine = wpb.ConnectRequest(hello=wpb.Hello(queues=["q"] * queues, wire_names=["w"] * wire_names))
    parsed = _deserialize(method, fine.SerializeToString(), wpb.ConnectRequest.FromString)
    assert len(parsed.hello.queues) == queues  # type: ignore[attr-defined]
    assert len(parsed.hello.wire_names) == wire_names  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_sole_field_names_a_message_of_exactly_one_length_delimited_field(data: bytes) -> None:
    number = sole_field(data)
    if number is None:
        return
    fields = list(field_values(data, number, max_fields=2))
    assert len(fields) == 1
    assert count_fields(data, {number: 1, OTHER_FIELDS: 0}) == {number: 1, OTHER_FIELDS: 0}


def test_sole_field_of_stream_messages() -> None:
    assert sole_field(wpb.ConnectRequest(credit=wpb.Credit(count=1)).SerializeToString()) == 2
    assert sole_field(wpb.ConnectRequest(hello=wpb.Hello(worker_id="w")).SerializeToString()) == 1
    two = wpb.ConnectRequest(credit=wpb.Credit(count=1)).SerializeToString() * 2
    assert sole_field(two) is None
    assert sole_field(b"\x02\x00") is None  # field 0 is no field


def test_heartbeat_attempts_and_progress_are_counted_before_parsing() -> None:
    """A heartbeat of millions of empty attempt IDs is a few MB on the wire and far more
    once parsed: it is refused on its count, over every heartbeat field of the message."""
    method = "/runwick.v1.WorkerService/Connect"
    most = STREAM_BOUNDS.max_heartbeat_attempts

    def never(data: bytes) -> None:
        raise AssertionError("parsed")

    flood = wpb.ConnectRequest(heartbeat=wpb.Heartbeat(attempt_ids=[""] * 5_000_000)).SerializeToString()
    assert _refusal(_deserialize(method, flood, never)) == ("InvalidArgument", "OUT_OF_RANGE")
    half = wpb.ConnectRequest(
        heartbeat=wpb.Heartbeat(attempt_ids=["a"] * (most // 2 + 1))
    ).SerializeToString()
    assert _refusal(_deserialize(method, half * 2, never)) == ("InvalidArgument", "OUT_OF_RANGE")
    fine = wpb.ConnectRequest(heartbeat=wpb.Heartbeat(attempt_ids=["a"] * most)).SerializeToString()
    parsed = _deserialize(method, fine, wpb.ConnectRequest.FromString)
    assert len(parsed.heartbeat.attempt_ids) == most  # type: ignore[attr-defined]
    result = wpb.ConnectRequest(result=wpb.Result(attempt_id="a")).SerializeToString()
    assert _deserialize(method, result, wpb.ConnectRequest.FromString).result.attempt_id == "a"  # type: ignore[attr-defined]
