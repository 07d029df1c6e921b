"""Property-based tests (hypothesis) of the last rule of docs/limits.md — "the coordinator never
crashes on any input" — against a real coordinator on port 0, on both engines.

Requests are generated from the protobuf descriptors, so every RPC of ``JobService``
(including ones added later) and the ``WorkerService`` stream get arbitrary and
boundary-sized messages: names at and over ``max_wire_name_length`` (with characters
outside the BMP), payloads and outputs at their bounds and one byte over, IDs known to
the store, random and malformed, durations and timestamps out of range or not whole
milliseconds, unknown enum values, page tokens the coordinator never issued (numbers
``int`` refuses or SQLite cannot hold, base64 of ill-formed payloads), messages out of
order. After each one:

- the server answered with a status, never INTERNAL, UNKNOWN or UNAVAILABLE (a database
  error), and a non-OK status carries machine-readable details;
- a unary call that failed left the job tables exactly as they were;
- the store's invariants hold (``check_invariants``).

Small bounds keep boundary-sized messages cheap; examples are few and derandomized.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.pool import NullPool

from coordinator.config import CoordinatorConfig
from coordinator.domain.bounds import StoreBounds
from coordinator.domain.clock import OffsetClock
from coordinator.domain.lifecycle import Report
from coordinator.domain.records import NewJobSpec, WorkerIdentity
from coordinator.domain.settings import MAX_EXECUTIONS_RANGE, MAX_UNSTARTED_RANGE
from coordinator.domain.states import LEASED_STATES, JobState, Outcome
from coordinator.process import RunningCoordinator, start_coordinator
from coordinator.service.work import AttemptMessage, ClaimRequest, ResultReport, WorkBatch
from coordinator.store.schema import attempts, jobs, transitions
from worker_sdk._errors import _rich_details
from worker_sdk.grammar import is_valid_code, utf16_length
from worker_sdk.proto.runwick.v1 import (
    admin_service_pb2,
    job_pb2,
    job_service_pb2,
    job_service_pb2_grpc,
    worker_service_pb2_grpc,
)
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

BOUNDS = StoreBounds(
    max_payload_bytes=256,
    max_wire_name_length=16,
    max_parents_per_job=4,
    max_output_bytes=128,
    max_failure_detail_bytes=128,
    max_failure_message_bytes=64,
    max_claim_batch=3,
    max_page_size=7,
    max_history_per_job=10,
    max_enqueue_batch=6,
)
WIRE = "fuzz.job"
KNOWN = "@known:"
"""A generated string ``@known:k`` becomes the k-th ID the store holds when sent."""
ASTRAL = "𠀀"  # a letter outside the BMP: two UTF-16 code units
NOW_S = 1_767_225_600
ALLOWED_UNARY = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,  # a client-chosen job ID or a schedule name taken
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
ALLOWED_STREAM = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION}
DETAILS_KEY = "grpc-status-details-bin"
CLIENT_WRITE_RACE = "Internal error from Core"
FUZZ_SETTINGS = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
JOB_SERVICE = job_service_pb2.DESCRIPTOR.services_by_name["JobService"]
ADMIN_SERVICE = admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"]
UNARY_METHODS = [(service, method) for service in (JOB_SERVICE, ADMIN_SERVICE) for method in service.methods]


# -- strategies ---------------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
NAMES = st.sampled_from(
    [
        WIRE,
        "default",
        "a",
        "x" * BOUNDS.max_wire_name_length,
        "x" * (BOUNDS.max_wire_name_length + 1),
        ASTRAL * (BOUNDS.max_wire_name_length // 2),
        "x" * (BOUNDS.max_wire_name_length - 1) + ASTRAL,
        "заказ.создан",
        "a b",
        "nul\x00",
        "😀",
        "",
    ]
)
IDS = st.one_of(
    st.integers(0, 9).map(lambda k: f"{KNOWN}{k}"),
    st.uuids().map(str),
    st.sampled_from(
        [
            "",
            "not-a-uuid",
            "0193A7C2-5B1E-7C3D-9F00-1A2B3C4D5E6F",
            "{0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f}",
            "0193a7c2-5b1e-7c3d-9f00-1a2b3c4d5e6f\x00",
            "x" * 300,
        ]
    ),
)


def _token(version: int, kind: bytes, position: bytes) -> str:
    return base64.urlsafe_b64encode(bytes([version]) + kind + position).rstrip(b"=").decode()


_BAD_TOKENS = st.sampled_from(
    [
        "³",  # a digit to str.isdigit, not to int
        "9223372036854775808",  # 2**63: over SQLite's INTEGER
        "٣",  # an Arabic-Indic digit: int() takes it
        "9223372036854775807",
        "-1",
        "0",
        "1",
        "",
        "====",
        "AWEAAAAAAAAAAA",  # ListAuditEvents' encoding of position 0 (out of range)
        "AWH__________w",  # ... of 2**64 - 1
        "AWGAAAAAAAAAAA",  # ... of 2**63
        "AWEAAAAAAAAAAQ=",  # padded
        "AWEAAAAAAAAAAR",  # stray low bits
    ]
)
PAGE_TOKENS = st.one_of(
    _BAD_TOKENS,
    _BAD_TOKENS,
    _BAD_TOKENS,
    st.integers(-(2**64), 2**64).map(str),
    st.builds(
        _token,
        st.sampled_from([0, 1, 1, 2, 255]),
        st.sampled_from([b"a", b"j", b"x"]),
        st.one_of(st.binary(max_size=20), st.integers(0, 2**64 - 1).map(lambda n: n.to_bytes(8, "big"))),
    ),
    IDS,
    TEXT,
)
"""Page tokens: numbers ``int`` takes or refuses, in and out of range, URL-safe base64 of
well- and ill-formed payloads (every version, list and length), IDs and text."""
NASTY = st.sampled_from(["\x00", "nul\x00", "x" * 300, "😀", "a b", "", "\u202e", "\u2028", " "])
"""Strings that break stores and parsers: NUL (PostgreSQL text refuses it), over-long,
outside the BMP, control and separator characters."""
STRINGS = st.one_of(NAMES, IDS, TEXT, NASTY)
# Text at the truncation caps, with characters of 1 to 4 UTF-8 bytes (and NUL).
CAPPED_TEXT = st.builds(
    lambda char, count: char * count, st.sampled_from(["a", "é", "€", "😀", "\x00"]), st.integers(0, 140)
)
INT32 = st.one_of(
    st.integers(-3, 8), st.sampled_from([2**31 - 1, -(2**31), 100, 101, 499, 500, 501, 10_000, 10_001])
)
ENUMS = st.integers(-2, 12)
DURATIONS = st.one_of(
    st.integers(0, 40).map(lambda ms: Duration(nanos=ms * 1_000_000)),
    st.sampled_from(
        [
            Duration(nanos=1),
            Duration(nanos=999_999_999),
            Duration(nanos=1_000_000_000),
            Duration(seconds=-1),
            Duration(seconds=1, nanos=-1),
            Duration(seconds=-1, nanos=1),
            Duration(seconds=3_601),
            Duration(seconds=86_401),
            Duration(seconds=30 * 86_400 + 1),
            Duration(seconds=10**12),
            Duration(seconds=-(10**12)),
        ]
    ),
)
TIMESTAMPS = st.one_of(
    st.integers(-(10**6), 10**6).map(lambda d: Timestamp(seconds=NOW_S + d)),
    st.sampled_from(
        [
            Timestamp(seconds=2**62),
            Timestamp(seconds=-(2**62)),
            Timestamp(nanos=-1),
            Timestamp(nanos=10**9),
            Timestamp(seconds=253_402_300_799, nanos=999_999_999),
            Timestamp(seconds=-62_135_596_800),
        ]
    ),
)
_REPEATS = {"jobs": BOUNDS.max_enqueue_batch + 1, "parent_ids": BOUNDS.max_parents_per_job + 2}


def sized_bytes(bound: int) -> st.SearchStrategy[bytes]:
    sizes = st.sampled_from([0, 1, bound - 1, bound, bound + 1, 2 * bound])
    return st.one_of(sizes.map(lambda n: b"\x00\xff" * (n // 2) + b"x" * (n % 2)), st.binary(max_size=16))


def _field_values(item: FieldDescriptor, depth: int) -> st.SearchStrategy[Any] | None:
    name = item.name
    if item.type == FieldDescriptor.TYPE_MESSAGE:
        message_type = item.message_type
        if message_type.full_name == "google.protobuf.Duration":
            return DURATIONS
        if message_type.full_name == "google.protobuf.Timestamp":
            return TIMESTAMPS
        if message_type.GetOptions().map_entry or depth >= 2:
            return None
        return messages(message_type, depth + 1)
    if item.type == FieldDescriptor.TYPE_STRING:
        if name == "page_token":
            return PAGE_TOKENS
        if name in ("id", "job_id", "attempt_id") or name.endswith("_ids"):
            return st.one_of(IDS, IDS, TEXT)
        if name in ("wire_name", "queue", "wire_names", "queues"):
            return st.one_of(NAMES, NAMES, TEXT)
        if name in ("message", "detail", "exception_type", "error_code"):
            return st.one_of(CAPPED_TEXT, STRINGS)
        return STRINGS
    if item.type == FieldDescriptor.TYPE_BYTES:
        return sized_bytes(BOUNDS.max_output_bytes if name == "output" else BOUNDS.max_payload_bytes)
    if item.type == FieldDescriptor.TYPE_ENUM:
        return ENUMS
    if item.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if item.type in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return INT32
    if item.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return st.one_of(INT32, st.sampled_from([2**63 - 1, -(2**63)]))
    if item.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.sampled_from([0, 1, 7, 2**32 - 1])
    if item.type in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.sampled_from([0, 1, 7, 2**64 - 1])
    if item.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32)
    return None


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Arbitrary messages of ``descriptor``: any subset of fields, each value drawn from
    the strategy its type and name suggest (IDs, names, sizes at the bounds...)."""
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for item in descriptor.fields:
        values = _field_values(item, depth)
        if values is None:
            continue
        optional[item.name] = (
            st.lists(values, max_size=_REPEATS.get(item.name, 4)) if item.is_repeated else values
        )
    return st.fixed_dictionaries({}, optional=optional).map(partial(_build, descriptor))


def _build(descriptor: Descriptor, values: dict[str, Any]) -> Message:
    message = GetMessageClass(descriptor)()
    for name, value in values.items():
        item = descriptor.fields_by_name[name]
        if item.is_repeated:
            getattr(message, name).extend(value)
        elif item.type == FieldDescriptor.TYPE_MESSAGE:
            getattr(message, name).CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def resolve(message: Message, known: list[str], rng: random.Random) -> None:
    """Replaces every ``@known:k`` string with an ID the store holds (in place)."""

    def pick(text: str) -> str:
        if not text.startswith(KNOWN):
            return text
        if not known:
            return f"0193a7c2-5b1e-7c3d-9f00-{rng.getrandbits(48):012x}"
        return known[int(text.removeprefix(KNOWN)) % len(known)]

    for item, value in message.ListFields():
        if item.type == FieldDescriptor.TYPE_STRING:
            if item.is_repeated:
                value[:] = [pick(v) for v in value]
            else:
                setattr(message, item.name, pick(value))
        elif item.type == FieldDescriptor.TYPE_MESSAGE and not item.message_type.GetOptions().map_entry:
            for child in value if item.is_repeated else [value]:
                resolve(child, known, rng)


# -- the coordinator and its store --------------------------------------------------------------


class _Records(logging.Handler):
    """What the coordinator logged: its answers (DEBUG) and any ERROR."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[logging.LogRecord]:
        taken, self.records = self.records, []
        return taken


@dataclass
class Fuzz:
    running: RunningCoordinator
    clock: OffsetClock
    engine: Engine
    channel: grpc.aio.Channel
    log: _Records
    rng: random.Random = field(default_factory=lambda: random.Random(3))

    def assert_no_server_errors(self, records: list[logging.LogRecord]) -> None:
        errors = [r.getMessage() for r in records if r.levelno >= logging.ERROR]
        assert errors == [], f"the coordinator logged errors: {errors}"

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        with self.engine.connect() as conn:
            return {
                table.name: [
                    tuple(r) for r in conn.execute(select(table).order_by(*table.primary_key.columns))
                ]
                for table in (jobs, attempts, transitions)
            }

    def known_ids(self) -> list[str]:
        with self.engine.connect() as conn:
            job_ids = list(conn.execute(select(jobs.c.id).order_by(jobs.c.id)).scalars())
            attempt_ids = list(conn.execute(select(attempts.c.id).order_by(attempts.c.id)).scalars())
        return job_ids + attempt_ids

    async def recover_leases(self) -> None:
        """Jumps past every lease and runs expiry, so each example starts unleased."""
        self.clock.offset_ms += 3 * 3_600_000
        await self.running.run_maintenance()


@pytest.fixture
async def fuzz(database_url: str) -> AsyncIterator[Fuzz]:
    clock = OffsetClock()
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=database_url,
            port=0,
            bounds=BOUNDS,
            maintenance_interval_s=3600,
            idle_recheck_interval_s=0.2,
            drain_timeout_s=1,
            hello_timeout_s=2,
        ),
        clock=clock,
    )
    _seed(running)
    engine = create_engine(running.store.url, poolclass=NullPool)
    channel = grpc.aio.insecure_channel(running.target, options=[("grpc.max_send_message_length", -1)])
    records = _Records()
    logger = logging.getLogger("coordinator")
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        yield Fuzz(running, clock, engine, channel, records)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
        await channel.close()
        engine.dispose()
        await running.stop(grace_s=1)


def _seed(running: RunningCoordinator) -> None:
    """Jobs in every state a read or a write may meet: available, scheduled, reserved,
    running, succeeded (with output), failed (with failure text)."""
    now = running.clock.now_ms()
    service, ops = running.app.jobs, running.app.ops
    service.enqueue([NewJobSpec(WIRE, b"{}", queue=f"seed{n}") for n in range(5)])
    service.enqueue([NewJobSpec(WIRE, b"later", run_at_ms=now + 3_600_000)])
    claims = ops.process(
        WorkBatch(claims=[ClaimRequest("seeder", (f"seed{n}",), (WIRE,), 1, 3_600_000) for n in range(4)])
    ).claims
    attempt_ids = [claimed[0].attempt_id for claimed in claims]
    seeder = WorkerIdentity("seeder")
    ops.process(WorkBatch(starts=[AttemptMessage(a, seeder) for a in attempt_ids[1:]]))
    ops.process(
        WorkBatch(
            results=[
                ResultReport(attempt_ids[2], Report(Outcome.SUCCEEDED), b"out", seeder),
                ResultReport(
                    attempt_ids[3],
                    Report(Outcome.PERMANENT_FAILURE, "boom", "E", "why", "trace"),
                    sender=seeder,
                ),
            ]
        )
    )


def check_invariants(fuzz: Fuzz) -> None:
    """What must hold of the store whatever clients sent (docs/concepts.md, docs/limits.md, R-11)."""
    with fuzz.engine.connect() as conn:
        job_rows = [r._mapping for r in conn.execute(select(jobs))]
        attempt_rows = [r._mapping for r in conn.execute(select(attempts))]
        transition_rows = [r._mapping for r in conn.execute(select(transitions))]
    jobs_by_id = {row["id"]: row for row in job_rows}
    attempts_by_id = {row["id"]: row for row in attempt_rows}
    for row in attempt_rows:
        assert row["job_id"] in jobs_by_id, f"attempt {row['id']} of a missing job"
        assert row["detail"] is None or len(row["detail"].encode()) <= BOUNDS.max_failure_detail_bytes
        assert row["message"] is None or len(row["message"].encode()) <= BOUNDS.max_failure_message_bytes
        assert row["error_code"] is None or is_valid_code(row["error_code"])
        assert row["outcome"] is None or Outcome(row["outcome"])
        assert row["started_at_ms"] is None or row["execution_number"] >= 1
    for row in transition_rows:
        assert row["job_id"] in jobs_by_id
    for job_id, row in jobs_by_id.items():
        state = JobState(row["state"])
        assert len(row["payload"]) <= BOUNDS.max_payload_bytes
        assert utf16_length(row["wire_name"]) <= BOUNDS.max_wire_name_length
        assert all(ch.isalnum() or ch in "._-" for ch in row["wire_name"]) and row["wire_name"]
        assert MAX_EXECUTIONS_RANGE[0] <= row["max_executions"] <= MAX_EXECUTIONS_RANGE[1]
        assert MAX_UNSTARTED_RANGE[0] <= row["max_unstarted_abandonments"] <= MAX_UNSTARTED_RANGE[1]
        assert 0 <= row["executions"] <= row["max_executions"]
        assert 1 <= row["retry_initial_delay_ms"] <= row["retry_max_delay_ms"] <= 86_400_000
        if row["output"] is not None:
            assert state is JobState.SUCCEEDED and len(row["output"]) <= BOUNDS.max_output_bytes
        assert (row["finished_at_ms"] is not None) == state.terminal
        open_attempts = [a for a in attempt_rows if a["job_id"] == job_id and a["outcome"] is None]
        if state in LEASED_STATES:
            current = attempts_by_id.get(row["current_attempt_id"])
            assert current is not None and current["job_id"] == job_id, f"{state} job without its attempt"
            assert current["outcome"] is None and open_attempts == [current]
            assert row["lease_expires_at_ms"] is not None and row["worker_id"] is not None
            assert (current["started_at_ms"] is not None) == (state is JobState.RUNNING)
        else:
            assert row["current_attempt_id"] is None and row["lease_expires_at_ms"] is None
            assert open_attempts == []
        # The history as the store reads it: its rows and the starts read back from the
        # attempts (``store.history``).
        history = [t.seq for t in fuzz.running.store.list_transitions(job_id)]
        assert 1 <= len(history) <= BOUNDS.max_history_per_job
        assert history == list(range(row["history_seq"] - len(history) + 1, row["history_seq"] + 1))


# -- JobService: every RPC ----------------------------------------------------------------------


def _status_details(metadata: Any) -> bytes | None:
    for key, value in metadata or ():
        if key == DETAILS_KEY:
            return bytes(value)
    return None


@pytest.mark.parametrize(
    ("service", "method"),
    [(service.full_name, method.name) for service, method in UNARY_METHODS],
)
@settings(FUZZ_SETTINGS, max_examples=18)
@given(data=st.data())
async def test_s5_every_unary_rpc_answers_any_request_with_a_status(
    fuzz: Fuzz, service: str, method: str, data: st.DataObject
) -> None:
    """Every JobService and AdminService RPC, with generated requests."""
    descriptor = next(m for s, m in UNARY_METHODS if s.full_name == service and m.name == method)
    request = data.draw(messages(descriptor.input_type), label="request")
    resolve(request, fuzz.known_ids(), fuzz.rng)
    if "timeout" in descriptor.input_type.fields_by_name and not request.HasField("timeout"):
        # Unset means WaitJob's 30 s default: generated waits stay short or invalid.
        request.timeout.CopyFrom(Duration(nanos=20_000_000))  # type: ignore[attr-defined]
    await _check_unary_answer(fuzz, descriptor, request)


async def _check_unary_answer(fuzz: Fuzz, descriptor: Any, request: Message) -> grpc.aio.AioRpcError | None:
    """Sends ``request`` and checks the answer is a status with details, that a failed
    call changed nothing and that nothing was logged as an error; returns the error."""
    method = descriptor.name
    call = fuzz.channel.unary_unary(
        f"/{descriptor.containing_service.full_name}/{method}",
        request_serializer=type(request).SerializeToString,
        response_deserializer=GetMessageClass(descriptor.output_type).FromString,
    )
    before = fuzz.rows()
    fuzz.log.take()

    failed: grpc.aio.AioRpcError | None = None
    try:
        await call(request, timeout=15)
        code = grpc.StatusCode.OK
    except grpc.aio.AioRpcError as error:
        failed = error
        code = error.code()
        assert code in ALLOWED_UNARY, f"{method} answered {code}: {error.details()}"
        assert error.details(), "a status a person can read"
        if code is not grpc.StatusCode.RESOURCE_EXHAUSTED:
            assert _status_details(error.trailing_metadata()) is not None, "no machine-readable details"
        assert fuzz.rows() == before, f"a failed {method} changed the store"
    event(f"status {code.name}")  # shown by --hypothesis-show-statistics
    fuzz.assert_no_server_errors(fuzz.log.take())
    check_invariants(fuzz)
    return failed


LIST_METHODS = [(s, m) for s, m in UNARY_METHODS if "page_token" in m.input_type.fields_by_name]


@pytest.mark.parametrize(
    ("service", "method"), [(service.full_name, method.name) for service, method in LIST_METHODS]
)
@settings(FUZZ_SETTINGS, max_examples=20)
@given(token=PAGE_TOKENS, page_size=INT32)
async def test_s5_every_list_rpc_refuses_a_page_token_it_did_not_issue(
    fuzz: Fuzz, service: str, method: str, token: str, page_size: int
) -> None:
    """Page tokens are opaque: whatever a client makes up is INVALID_ARGUMENT naming
    ``page_token`` (or ``page_size``), never INTERNAL, and reads nothing."""
    descriptor = next(m for s, m in LIST_METHODS if s.full_name == service and m.name == method)
    request = GetMessageClass(descriptor.input_type)(page_token=token, page_size=page_size)

    error = await _check_unary_answer(fuzz, descriptor, request)

    if error is not None:
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
        reason, _, violations = _rich_details(error)
        assert [v.field for v in violations] in (["page_token"], ["page_size"]), violations
        if violations[0].field == "page_token":
            assert reason == "PAGE_TOKEN_INVALID"
            event("page_token refused")


VALID_NAMES = st.sampled_from(
    [WIRE, "x" * BOUNDS.max_wire_name_length, ASTRAL * (BOUNDS.max_wire_name_length // 2), "заказ"]
)
NEAR_BOUND_JOBS = st.builds(
    job_service_pb2.NewJob,
    wire_name=st.one_of(VALID_NAMES, VALID_NAMES, VALID_NAMES, NAMES),
    queue=st.sampled_from(["", "default", "other"]),
    payload=st.sampled_from([0, 1, BOUNDS.max_payload_bytes, BOUNDS.max_payload_bytes + 1]).map(
        lambda n: b"p" * n
    ),
    priority=INT32,
    idempotency_key=st.one_of(st.just(""), st.just(""), st.just(""), TEXT),
    parent_ids=st.one_of(*[st.just([])] * 4, st.lists(IDS, max_size=BOUNDS.max_parents_per_job + 1)),
    run_at=st.one_of(st.none(), TIMESTAMPS),
    settings=st.one_of(st.none(), st.none(), messages(job_pb2.JobSettings.DESCRIPTOR, 1)),
)


@settings(FUZZ_SETTINGS, max_examples=25)
@given(
    batch=st.one_of(
        st.lists(NEAR_BOUND_JOBS, min_size=1, max_size=2),
        st.lists(NEAR_BOUND_JOBS, min_size=1, max_size=BOUNDS.max_enqueue_batch + 1),
    )
)
async def test_s5_enqueue_near_the_bounds_is_all_or_nothing_and_names_the_index(
    fuzz: Fuzz, batch: list[job_service_pb2.NewJob]
) -> None:
    """Batches of mostly valid jobs with payloads and names at their bounds and one over:
    either every job is stored exactly as sent, or none is and the error names the first
    offending job's index."""
    request = job_service_pb2.EnqueueRequest(jobs=batch)
    resolve(request, fuzz.known_ids(), fuzz.rng)
    before = fuzz.rows()
    stub = job_service_pb2_grpc.JobServiceStub(fuzz.channel)
    try:
        response = await stub.Enqueue(request, timeout=15)
    except grpc.aio.AioRpcError as error:
        event(f"status {error.code().name}")
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert fuzz.rows() == before
        reason, metadata, violations = _rich_details(error)
        if reason != "BATCH_TOO_LARGE":
            index = int(metadata["index"])
            assert violations[0].field.startswith(f"jobs[{index}].")
            assert all(_plainly_valid(job) for job in batch[:index])
    else:
        event("status OK")
        assert len(response.jobs) == len(batch) <= BOUNDS.max_enqueue_batch
        for sent, created in zip(batch, response.jobs, strict=True):
            stored = fuzz.running.store.get_job(created.id)
            assert stored is not None and stored.wire_name == sent.wire_name
            if not created.existing:
                assert stored.payload == sent.payload
    check_invariants(fuzz)


def _plainly_valid(job: job_service_pb2.NewJob) -> bool:
    """What a job before the offending one must satisfy: the bounds checked first."""
    name = job.wire_name
    return (
        len(job.payload) <= BOUNDS.max_payload_bytes
        and 0 < utf16_length(name) <= BOUNDS.max_wire_name_length
        and all(ch.isalnum() or ch in "._-" for ch in name)
        and not job.parent_ids
    )


# -- WorkerService: the stream ------------------------------------------------------------------

REFS = st.one_of(
    st.integers(0, 3).map(lambda k: ("assigned", k)),
    st.just(("random",)),
    st.sampled_from([("raw", ""), ("raw", "garbage"), ("raw", "x" * 300)]),
)
REPORTABLE = [job_pb2.OUTCOME_SUCCEEDED, job_pb2.OUTCOME_RETRYABLE_FAILURE, job_pb2.OUTCOME_PERMANENT_FAILURE]
OUTCOMES = st.one_of(st.sampled_from(REPORTABLE), st.sampled_from([*range(0, 10), 42, -1]))
MOSTLY_NONE = st.one_of(st.none(), st.none(), st.none(), DURATIONS)
RESULTS = st.tuples(
    st.just("result"),
    REFS,
    OUTCOMES,
    st.one_of(st.just(""), STRINGS),
    CAPPED_TEXT,
    CAPPED_TEXT,
    sized_bytes(BOUNDS.max_output_bytes),
    MOSTLY_NONE,
)
ACTIONS = st.one_of(
    st.tuples(st.just("credit"), st.one_of(st.integers(-2, 4), st.just(2**31 - 1))),
    st.tuples(st.just("start"), REFS),
    st.tuples(st.just("heartbeat"), st.lists(REFS, max_size=3), MOSTLY_NONE),
    RESULTS,
    st.tuples(st.just("release"), REFS),
    st.tuples(st.just("run"), st.integers(0, 3), RESULTS),
    st.tuples(st.just("run"), st.integers(0, 3), RESULTS),
    st.tuples(st.just("wait")),
    st.tuples(st.sampled_from(["hello", "empty"])),  # out of order: end the stream
)
VALID_HELLO = pb.Hello(worker_id="fuzz-worker", wire_names=[WIRE], capacity=3, lease=Duration(seconds=60))
MUTATED_HELLOS = st.builds(
    lambda worker_id, capacity, lease, queues: pb.Hello(
        worker_id=worker_id, wire_names=[WIRE], capacity=capacity, lease=lease, queues=queues
    ),
    st.one_of(st.just("fuzz-worker"), NASTY, STRINGS),
    st.one_of(st.just(3), INT32),
    st.one_of(st.just(Duration(seconds=60)), DURATIONS),
    st.one_of(st.just([]), st.lists(NAMES, max_size=2)),
)
HELLOS = st.one_of(st.just(VALID_HELLO), MUTATED_HELLOS, MUTATED_HELLOS, messages(pb.Hello.DESCRIPTOR))


@dataclass
class _Stream:
    outgoing: asyncio.Queue[pb.ConnectRequest | None] = field(default_factory=asyncio.Queue)
    received: list[pb.ConnectResponse] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def requests(self) -> AsyncIterator[pb.ConnectRequest]:
        while (message := await self.outgoing.get()) is not None:
            yield message

    def assigned(self) -> int:
        return sum(1 for m in self.received if m.WhichOneof("kind") == "assignment")

    def attempt(self, ref: tuple[Any, ...], rng: random.Random) -> str:
        if ref[0] == "raw":
            return str(ref[1])
        assigned = [m.assignment.attempt_id for m in self.received if m.WhichOneof("kind") == "assignment"]
        if ref[0] == "assigned" and assigned:
            return assigned[int(ref[1]) % len(assigned)]
        return f"0193a7c2-5b1e-7c3d-9f00-{rng.getrandbits(48):012x}"


def _message(action: tuple[Any, ...], stream: _Stream, rng: random.Random) -> pb.ConnectRequest:
    kind = action[0]
    if kind == "credit":
        return pb.ConnectRequest(credit=pb.Credit(count=action[1]))
    if kind == "start":
        return pb.ConnectRequest(start=pb.StartRequest(attempt_id=stream.attempt(action[1], rng)))
    if kind == "release":
        return pb.ConnectRequest(release=pb.Release(attempt_id=stream.attempt(action[1], rng)))
    if kind == "heartbeat":
        beat = pb.Heartbeat(attempt_ids=[stream.attempt(ref, rng) for ref in action[1]])
        if action[2] is not None:
            beat.lease.CopyFrom(action[2])
        return pb.ConnectRequest(heartbeat=beat)
    if kind == "result":
        _, ref, outcome, code, message, detail, output, delay = action
        result = pb.Result(
            attempt_id=stream.attempt(ref, rng),
            outcome=outcome,
            error_code=code,
            exception_type=message * 5,
            message=message,
            detail=detail,
            output=output,
        )
        if delay is not None:
            result.retry_delay.CopyFrom(delay)
        return pb.ConnectRequest(result=result)
    if kind == "hello":
        return pb.ConnectRequest(hello=VALID_HELLO)
    return pb.ConnectRequest()


async def _enqueue_claimable(fuzz: Fuzz, count: int) -> None:
    """Jobs for the fuzzed worker to be assigned, over the real JobService."""
    stub = job_service_pb2_grpc.JobServiceStub(fuzz.channel)
    new_jobs = [job_service_pb2.NewJob(wire_name=WIRE, payload=b"{}") for _ in range(count)]
    await stub.Enqueue(job_service_pb2.EnqueueRequest(jobs=new_jobs), timeout=15)


async def _until(stream: _Stream, condition: Any, timeout_s: float = 1.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition() and loop.time() < deadline:
        stream.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stream.changed.wait(), deadline - loop.time())


async def _read_all(call: Any, stream: _Stream) -> None:
    try:
        async for message in call:
            stream.received.append(message)
            stream.changed.set()
    finally:
        stream.changed.set()


@settings(FUZZ_SETTINGS, max_examples=30)
@given(hello=HELLOS, warm_up=st.booleans(), actions=st.lists(ACTIONS, max_size=12))
async def test_s5_the_worker_stream_answers_any_message_sequence_with_a_status(
    fuzz: Fuzz, hello: pb.Hello, warm_up: bool, actions: list[tuple[Any, ...]]
) -> None:
    await _enqueue_claimable(fuzz, 2)
    fuzz.log.take()
    stream = _Stream()
    stream.outgoing.put_nowait(pb.ConnectRequest(hello=hello))
    call = worker_service_pb2_grpc.WorkerServiceStub(fuzz.channel).Connect(stream.requests())
    reader = asyncio.create_task(_read_all(call, stream))
    await asyncio.sleep(0.02)
    if warm_up:  # take assignments first, so the actions can name real attempts
        stream.outgoing.put_nowait(pb.ConnectRequest(credit=pb.Credit(count=2)))
        await _until(stream, lambda: stream.assigned() >= 2 or reader.done())
    for action in actions:
        if action[0] == "wait":
            await asyncio.sleep(0.03)
        elif action[0] == "run":  # start an assigned attempt, then report its result
            ref = ("assigned", action[1])
            stream.outgoing.put_nowait(_message(("start", ref), stream, fuzz.rng))
            await asyncio.sleep(0.02)
            stream.outgoing.put_nowait(_message(("result", ref, *action[2][2:]), stream, fuzz.rng))
        else:
            stream.outgoing.put_nowait(_message(action, stream, fuzz.rng))
    await asyncio.sleep(0.03)
    stream.outgoing.put_nowait(None)  # half-close: the coordinator ends the stream

    code = await asyncio.wait_for(call.code(), 15)
    await asyncio.wait({reader}, timeout=5)
    reader.cancel()

    event(f"status {code.name}")
    records = fuzz.log.take()
    fuzz.assert_no_server_errors(records)
    details = await call.details()
    if code is grpc.StatusCode.INTERNAL and details == CLIENT_WRITE_RACE:
        # grpc.aio's client turns a write racing the server's end of the stream into
        # INTERNAL on its side: what the server answered is in its log.
        answered = [r.getMessage() for r in records if "Connect answered" in r.getMessage()]
        assert answered and all(
            any(f"answered {allowed.name} " in a for allowed in ALLOWED_STREAM) for a in answered
        ), answered
    else:
        assert code in ALLOWED_STREAM, f"stream ended {code}: {details}"
        if code is not grpc.StatusCode.OK:
            assert details
            assert _status_details(await call.trailing_metadata()) is not None
    acks = [m.result_ack for m in stream.received if m.WhichOneof("kind") == "result_ack"]
    for ack in acks:
        event(f"result ack {pb.ResultAck.Status.Name(ack.status)} {ack.reason}")
    assert all(ack.status != pb.ResultAck.STATUS_UNSPECIFIED for ack in acks)
    assert all(ack.reason for ack in acks if ack.status == pb.ResultAck.STATUS_REJECTED)
    await fuzz.recover_leases()
    check_invariants(fuzz)
    assert fuzz.running.app.dispatcher.sessions == set() or code is grpc.StatusCode.OK


def test_the_generated_requests_cover_every_field_type() -> None:
    """Every field of every request and stream message has a strategy (so no field is
    left out of the fuzzing silently), maps excepted (none are inputs)."""

    def walk(descriptor: Descriptor) -> Iterator[FieldDescriptor]:
        for item in descriptor.fields:
            yield item
            if item.type == FieldDescriptor.TYPE_MESSAGE and item.message_type.full_name.startswith(
                "runwick"
            ):
                yield from walk(item.message_type)

    inputs = [m.input_type for m in JOB_SERVICE.methods] + [pb.ConnectRequest.DESCRIPTOR]
    for descriptor in inputs:
        for item in walk(descriptor):
            assert _field_values(item, 0) is not None, f"{descriptor.name}.{item.name}"
    assert {m.name for m in JOB_SERVICE.methods} >= {
        "Enqueue",
        "GetJob",
        "ListJobs",
        "ListAttempts",
        "WaitJob",
    }
    assert job_pb2.JobState.Value("JOB_STATE_CANCELLED") in range(-2, 13)
