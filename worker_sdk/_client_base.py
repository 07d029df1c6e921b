"""What ``Client`` and ``AsyncClient`` share: settings levels, request building and
response decoding. The two clients only add the transport (sync or asyncio gRPC)."""

from __future__ import annotations

import functools
import secrets
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from worker_sdk._connection import ConnectionOptions, warn_if_token_travels_in_clear
from worker_sdk._convert import duration, enqueued_from_proto, state_to_proto
from worker_sdk._errors import ArgumentError, CoordinatorError
from worker_sdk._info import EnqueuedJob, JobState
from worker_sdk._jobs import check_concurrency_key, encode_payload, spec_of
from worker_sdk._settings import JobConfig, SettingsLayer, check_delay_pair, check_timeout, pair
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2
from worker_sdk.trace_rules import trace_context_problem

DEFAULT_RPC_TIMEOUT = timedelta(seconds=30)
"""Deadline of each client call except ``wait``, unless the client says otherwise."""
MAX_WAIT_CHUNK = timedelta(seconds=30)
"""Longest single WaitJob call; longer waits loop (proxies dislike very long calls)."""
WAIT_CALL_MARGIN_S = 10.0
"""Extra gRPC deadline over a WaitJob call's own timeout."""


@dataclass(frozen=True, slots=True)
class EnqueueItem:
    """One job of an ``enqueue_many`` batch; the fields mirror ``enqueue``'s arguments."""

    payload: object
    run_at: datetime | None = None
    priority: int | None = None
    queue: str | None = None
    parents: Sequence[str] = ()
    idempotency_key: str | None = None
    job_id: str | None = None
    """A client-chosen ID (``new_job_id()``), so jobs of one batch can name each other
    as ``parents``; None lets the coordinator choose."""
    unique_key: str | None = None
    """At most one unfinished job of this type with this key: while one exists, the
    enqueue returns its ID instead of creating another."""
    concurrency_key: str | None = None
    """The job's concurrency key (docs/flow-control.md); None takes the job type's
    (``@job(concurrency_key=...)``), else the implicit key."""


def check_job_id(job_id: object) -> str:
    """Returns ``job_id`` if it is a non-empty str, else raises ArgumentError."""
    return check_id("job_id", job_id)


def check_id(name: str, value: object) -> str:
    """Returns ``value`` if it is a non-empty str, else raises ArgumentError."""
    if not isinstance(value, str) or not value:
        raise ArgumentError(f"{name} must be a non-empty str, got {value!r}")
    return value


class ClientBase:
    """Settings levels and request building shared by both clients."""

    def __init__(self, connection: ConnectionOptions, *, rpc_timeout: timedelta | None) -> None:
        warn_if_token_travels_in_clear(connection, type(self).__name__)
        self._metadata = connection.metadata
        self._rpc_timeout_s = None if rpc_timeout is None else rpc_timeout.total_seconds()
        self._defaults = SettingsLayer()
        self._configs: dict[type[Any], JobConfig] = {}

    def job_defaults(
        self,
        *,
        max_executions: int | None = None,
        retry_delay: tuple[timedelta, timedelta] | None = None,
        retry_initial_delay: timedelta | None = None,
        retry_max_delay: timedelta | None = None,
        execution_timeout: timedelta | None = None,
        max_unstarted_abandonments: int | None = None,
        unstarted_recovery_delay: tuple[timedelta, timedelta] | None = None,
    ) -> None:
        """Sets this client's job defaults, the lowest client-side level (R-3).

        Every job this client enqueues uses these values unless its ``@job`` declaration
        or ``configure_job`` says otherwise; the coordinator's own defaults fill what no
        level sets. Later calls override only the fields they pass.

        Args:
            max_executions: Started runs allowed, 1-100 (R-1).
            retry_delay: ``(initial, max)`` retry delay pair (R-2); or pass
                ``retry_initial_delay`` / ``retry_max_delay`` on their own.
            retry_initial_delay: Nominal delay before the first retry.
            retry_max_delay: Cap of the nominal retry delay.
            execution_timeout: Run timeout, whole ms up to 30 days (R-7).
            max_unstarted_abandonments: Consecutive unstarted claims allowed, 1-100 (R-4).
            unstarted_recovery_delay: ``(initial, max)`` re-queue delay pair (R-4).

        Raises:
            ArgumentError: A value is out of range or the pair is inconsistent.
        """
        if retry_delay is not None:
            if retry_initial_delay is not None or retry_max_delay is not None:
                raise ArgumentError("pass retry_delay or retry_initial_delay/retry_max_delay, not both")
            retry_initial_delay, retry_max_delay = pair("retry_delay", retry_delay)
        unstarted_initial = unstarted_max = None
        if unstarted_recovery_delay is not None:
            unstarted_initial, unstarted_max = pair("unstarted_recovery_delay", unstarted_recovery_delay)
        layer = SettingsLayer(
            max_executions=max_executions,
            retry_initial_delay=retry_initial_delay,
            retry_max_delay=retry_max_delay,
            execution_timeout=execution_timeout,
            max_unstarted_abandonments=max_unstarted_abandonments,
            unstarted_initial_delay=unstarted_initial,
            unstarted_max_delay=unstarted_max,
        ).checked()
        self._defaults = layer.over(self._defaults).checked()

    def configure_job(self, payload_type: type[Any]) -> JobConfig:
        """The fluent configuration of one job type, the highest level (R-3).

        Repeated calls for the same type return the same builder.

        Raises:
            ArgumentError: ``payload_type`` is not declared with ``@job``.
        """
        spec_of(payload_type)
        return self._configs.setdefault(payload_type, JobConfig())

    def _fill_job(self, message: job_service_pb2.NewJob, item: EnqueueItem) -> None:
        """Fills in ``message``, an entry just added to the request, from ``item``. Fields
        left at their defaults are not set at all, and the entry is built in place: a
        ``NewJob`` built apart would be copied into the request, its settings too."""
        spec, data = encode_payload(item.payload)
        config = self._configs.get(spec.payload_type)
        try:
            settings = _settings_message(spec.settings, config.layer if config else None, self._defaults)
        except ArgumentError as error:
            raise ArgumentError(f"{spec.wire_name}: {error}") from None
        if item.queue is not None and not isinstance(item.queue, str):
            raise ArgumentError(f"queue must be a str, got {type(item.queue).__name__}")
        priority = item.priority
        if priority is None:
            priority = config.priority if config and config.priority is not None else spec.priority
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ArgumentError(f"priority must be an int, got {type(priority).__name__}")
        message.wire_name = spec.wire_name
        message.queue = item.queue or (config.queue if config else None) or spec.queue
        message.payload = data
        message.payload_version = spec.version
        if priority:
            message.priority = priority
        if item.idempotency_key is not None:
            message.idempotency_key = _idempotency_key(item.idempotency_key)
        if settings is not None:
            message.settings.CopyFrom(settings)
        if item.parents != ():  # the default; anything else is checked, "" and None too
            message.parent_ids.extend(_parents(item.parents))
        if item.job_id is not None:
            message.id = check_id("job_id", item.job_id)
        if item.unique_key is not None:
            message.unique_key = _optional_key("unique_key", item.unique_key)
        # R-3's order: the enqueue's own key, then the job type's (derived from the payload).
        key = spec.key_for(item.payload) if item.concurrency_key is None else item.concurrency_key
        if key is not None:
            message.concurrency_key = check_concurrency_key(key)
        _set_run_at(message, item.run_at)

    def _raw_enqueue_request(
        self,
        wire_name: str,
        payload: bytes,
        *,
        payload_version: int,
        queue: str,
        priority: int,
        run_at: datetime | None,
        idempotency_key: str | None,
        max_executions: int | None,
        parents: Sequence[str],
        unique_key: str | None = None,
        retry_delay: timedelta | tuple[timedelta, timedelta] | None = None,
        execution_timeout: timedelta | None = None,
        traceparent: str | None = None,
        tracestate: str | None = None,
        concurrency_key: str | None = None,
    ) -> job_service_pb2.EnqueueRequest:
        """One NewJob as given: only types are checked here, values by the coordinator
        (the settings and a trace context also here, by the coordinator's own rules)."""
        if not isinstance(wire_name, str) or not isinstance(queue, str):
            raise ArgumentError("wire_name and queue must be str")
        if not isinstance(payload, bytes):
            raise ArgumentError(f"payload must be bytes, got {type(payload).__name__}")
        _check_int("payload_version", payload_version)
        _check_int("priority", priority)
        if max_executions is not None:
            _check_int("max_executions", max_executions)
        settings = _raw_settings(max_executions, retry_delay, execution_timeout).over(self._defaults)
        message = job_service_pb2.NewJob(
            wire_name=wire_name,
            queue=queue,
            payload=payload,
            payload_version=payload_version,
            priority=priority,
            idempotency_key=_idempotency_key(idempotency_key),
            settings=settings.to_proto(),
            parent_ids=_parents(parents),
            unique_key=_optional_key("unique_key", unique_key),
            concurrency_key=_raw_key(concurrency_key),
        )
        _set_run_at(message, run_at)
        context = given_trace_context(traceparent, tracestate)
        if context is not None:
            message.trace_context.CopyFrom(context)
        return job_service_pb2.EnqueueRequest(jobs=[message])

    @staticmethod
    def _enqueued_one(response: job_service_pb2.EnqueueResponse) -> EnqueuedJob:
        if len(response.jobs) != 1:
            raise CoordinatorError(f"coordinator answered {len(response.jobs)} jobs for 1 enqueued")
        return enqueued_from_proto(response.jobs[0])

    def _enqueue_request(self, items: Iterable[EnqueueItem | object]) -> job_service_pb2.EnqueueRequest:
        entries = [item if isinstance(item, EnqueueItem) else EnqueueItem(item) for item in items]
        if not entries:
            raise ArgumentError("enqueue_many needs at least one job")
        request = job_service_pb2.EnqueueRequest()
        add = request.jobs.add
        for index, entry in enumerate(entries):
            try:
                self._fill_job(add(), entry)
            except ArgumentError as error:
                if len(entries) == 1:
                    raise
                raise ArgumentError(f"job {index}: {error}") from error.__cause__
        return request

    @staticmethod
    def _enqueued_ids(response: job_service_pb2.EnqueueResponse, expected: int) -> list[str]:
        if len(response.jobs) != expected:
            raise CoordinatorError(f"coordinator answered {len(response.jobs)} jobs for {expected} enqueued")
        return [job.id for job in response.jobs]

    @staticmethod
    def _wait_deadline(timeout: timedelta) -> float:
        if not isinstance(timeout, timedelta) or timeout < timedelta(0):
            raise ArgumentError("timeout must be a non-negative timedelta")
        return time.monotonic() + timeout.total_seconds()

    @staticmethod
    def _wait_over(deadline: float) -> bool:
        return time.monotonic() >= deadline

    @staticmethod
    def _wait_request(job_id: str, deadline: float) -> tuple[job_service_pb2.WaitJobRequest, float]:
        """The next WaitJob request and its gRPC deadline in seconds."""
        remaining = timedelta(seconds=max(deadline - time.monotonic(), 0.0))
        chunk = max(min(remaining, MAX_WAIT_CHUNK), timedelta(milliseconds=1))
        chunk = chunk // timedelta(milliseconds=1) * timedelta(milliseconds=1)
        request = job_service_pb2.WaitJobRequest(id=job_id, timeout=duration(chunk))
        return request, chunk.total_seconds() + WAIT_CALL_MARGIN_S

    @staticmethod
    def _list_request(
        queue: str | None,
        state: JobState | str | None,
        wire_name: str | None,
        page_size: int | None,
        page_token: str,
    ) -> job_service_pb2.ListJobsRequest:
        request = job_service_pb2.ListJobsRequest(
            queue=queue or "", wire_name=wire_name or "", page_size=page_size or 0, page_token=page_token
        )
        if state is not None:
            try:
                request.state = state_to_proto(JobState(state))
            except ValueError:
                raise ArgumentError(f"unknown job state {state!r}") from None
        return request

    def _call_kwargs(self, timeout_s: float | None = None) -> dict[str, Any]:
        return {"metadata": self._metadata, "timeout": timeout_s or self._rpc_timeout_s}


@functools.lru_cache(maxsize=1024)
def _settings_message(
    declared: SettingsLayer, configured: SettingsLayer | None, defaults: SettingsLayer
) -> job_pb2.JobSettings | None:
    """The settings a job's enqueue sends: the type's declaration over the client's
    defaults, under what ``configure_job`` set (R-3), checked. The same three layers
    give the same message, so a batch of one type resolves them once (the layers are
    frozen; the message is copied into each job, never shared), or None when every
    setting is left to the coordinator's defaults."""
    layer = declared.over(defaults)
    if configured is not None:
        layer = configured.over(layer)
    message = layer.checked().to_proto()
    return message if message.ListFields() else None


def _raw_settings(
    max_executions: int | None,
    retry_delay: timedelta | tuple[timedelta, timedelta] | None,
    execution_timeout: timedelta | None,
) -> SettingsLayer:
    """A timedelta ``retry_delay`` sets the initial delay only, a pair both."""
    initial: timedelta | None
    maximum: timedelta | None
    if retry_delay is None or isinstance(retry_delay, timedelta):
        initial, maximum = retry_delay, None
    else:
        initial, maximum = _delay_pair(retry_delay)
    if retry_delay is not None:
        check_delay_pair("retry", initial, maximum)
    if execution_timeout is not None:
        check_timeout(execution_timeout)
    return SettingsLayer(
        max_executions=max_executions,
        retry_initial_delay=initial,
        retry_max_delay=maximum,
        execution_timeout=execution_timeout,
    )


def _delay_pair(value: object) -> tuple[timedelta, timedelta]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise ArgumentError("retry_delay must be a pair (initial, maximum) of timedelta")
    return value[0], value[1]


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(f"{name} must be an int, got {type(value).__name__}")


def _set_run_at(message: job_service_pb2.NewJob, run_at: datetime | None) -> None:
    if run_at is not None:
        if not isinstance(run_at, datetime) or run_at.utcoffset() is None:
            raise ArgumentError("run_at must be a timezone-aware datetime")
        message.run_at.FromDatetime(run_at)


def _optional_key(name: str, key: str | None) -> str:
    if key is None:
        return ""
    if not isinstance(key, str) or not key:
        raise ArgumentError(f"{name} must be a non-empty str or None")
    return key


def _raw_key(key: object) -> str:
    # enqueue_raw checks types only; the coordinator checks the grammar.
    if key is None:
        return ""
    if not isinstance(key, str):
        raise ArgumentError(f"concurrency_key must be a str or None, got {type(key).__name__}")
    return key


def _idempotency_key(key: str | None) -> str:
    if key is None:
        return ""
    if not isinstance(key, str) or not key:
        raise ArgumentError("idempotency_key must be a non-empty str or None")
    return key


def _parents(parents: Sequence[str]) -> list[str]:
    if isinstance(parents, str):
        raise ArgumentError("parents must be a sequence of job IDs, not one str")
    ids = list(parents)
    for parent in ids:
        if not isinstance(parent, str) or not parent:
            raise ArgumentError(f"parent job IDs must be non-empty str, got {parent!r}")
    return ids


def new_job_id() -> str:
    """A fresh job ID (a UUIDv7: random, and ordered by creation time) to give a job of
    an ``enqueue_many`` batch (``EnqueueItem.job_id``), so other jobs of the same batch
    can name it as a parent and the whole workflow is enqueued at once."""
    millis = time.time_ns() // 1_000_000
    value = (millis & (2**48 - 1)) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # the RFC 9562 variant
    return str(uuid.UUID(int=value))


def given_trace_context(traceparent: str | None, tracestate: str | None) -> job_pb2.TraceContext | None:
    """A trace context given by the caller (``enqueue_raw``), checked as the coordinator
    checks it, so a bad one is refused before any call; None when none was given."""
    if traceparent is None:
        if tracestate is not None:
            raise ArgumentError("tracestate needs a traceparent")
        return None
    if not isinstance(traceparent, str) or not isinstance(tracestate, str | None):
        raise ArgumentError("traceparent and tracestate must be str")
    problem = trace_context_problem(traceparent, tracestate or "")
    if problem is not None:
        raise ArgumentError(problem)
    return job_pb2.TraceContext(traceparent=traceparent, tracestate=tracestate or "")
