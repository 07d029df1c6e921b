"""OpenTelemetry traces of enqueues and runs, when ``opentelemetry-api`` is installed (the
``runwick[otel]`` extra); docs/observability.md.

- An enqueue call is a PRODUCER span ``send <queue>``; its context is injected into each
  job as a W3C trace context, which the coordinator stores and hands to the worker.
- A run is a CONSUMER span ``process <queue>``, a child of that context (a root span for
  a job enqueued without one: a schedule's tick), linked to the parents' contexts that
  came with the assignment, with its outcome and error code.

Both follow OpenTelemetry's messaging semantic conventions (``messaging.system`` is
``runwick``). Spans go to the global tracer provider: with no SDK configured they cost
next to nothing, and the producer then injects the caller's current context, if any.

Without the package, or with ``RUNWICK_OTEL=off`` in the environment, nothing here
imports it and every function does nothing: the module loads OpenTelemetry lazily, at
the first enqueue or run.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from worker_sdk._context import JobContext
from worker_sdk._pipeline import RunReport
from worker_sdk._results import Outcome
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as worker_pb
from worker_sdk.trace_rules import fit_tracestate

DISABLE_ENV = "RUNWICK_OTEL"
"""Set to ``off`` to keep the SDK from tracing even where OpenTelemetry is installed."""
SYSTEM = "runwick"
"""``messaging.system`` of every span."""
TRACER_NAME = "runwick"
TRACEPARENT, TRACESTATE = "traceparent", "tracestate"
_LOG_FIELDS_OFF: Mapping[str, str] = {}


class _OTel:
    """The OpenTelemetry API's parts this module uses, loaded once."""

    def __init__(self, tracer_provider: Any = None) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.context = context
        # The global provider's tracer is a proxy: it follows a provider set later.
        self.tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self.propagator = TraceContextTextMapPropagator()
        self.root = context.Context()
        """An empty context: a span started in it is a root span."""
        self._span_context = trace.SpanContext
        self._trace_flags = trace.TraceFlags
        self._trace_state = trace.TraceState
        self.consumer = trace.SpanKind.CONSUMER
        self._last_parent: tuple[str, str, Any] = ("", "", None)

    def remote_parent(self, carried: job_pb2.TraceContext) -> Any:
        """The context of a trace context the coordinator handed on, as its span's
        parent; None when it cannot be read. The jobs of one enqueue call share their
        context and usually run one after another, so the last one is kept: reading
        one again costs 3.3 µs, the comparison 0.2."""
        traceparent, tracestate = carried.traceparent, carried.tracestate
        last = self._last_parent
        if last[0] == traceparent and last[1] == tracestate:
            return last[2]
        context = self.remote_span_context(traceparent, tracestate)
        parent = None
        if context is not None:
            parent = self.trace.set_span_in_context(self.trace.NonRecordingSpan(context), self.root)
        self._last_parent = (traceparent, tracestate, parent)
        return parent

    def remote_span_context(self, traceparent: str, tracestate: str) -> Any:
        """The span context of a handed-on trace context, or None when it cannot be read.
        Parsed here rather than by the propagator: the coordinator keeps only well-formed
        ones (``trace_rules``), and this is on every run's path (a quarter of a run's
        span cost with the propagator)."""
        state = self._trace_state.from_header([tracestate]) if tracestate else None
        try:
            context = self._span_context(
                int(traceparent[3:35], 16),
                int(traceparent[36:52], 16),
                is_remote=True,
                trace_flags=self._trace_flags(int(traceparent[53:55], 16)),
                trace_state=state,
            )
        except ValueError:
            return None
        return context if context.is_valid else None


@functools.cache
def _otel() -> _OTel | None:
    """OpenTelemetry's API, or None when it is not installed or tracing is turned off;
    decided at the first call (the first enqueue or run)."""
    if os.environ.get(DISABLE_ENV, "").lower() in ("off", "0", "false"):
        return None
    try:
        return _OTel()
    except ImportError:
        return None


def load() -> bool:
    """Loads OpenTelemetry now if it is installed (a worker's start: the import is then
    no run's cost); whether the SDK traces."""
    return _otel() is not None


class SendSpan:
    """An enqueue call's span; ``enqueued`` names the jobs once the call answered."""

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def enqueued(self, job_ids: Sequence[str]) -> None:
        """Records the job ID as the message ID of a one-job enqueue."""
        if self._span is not None and len(job_ids) == 1:
            self._span.set_attribute("messaging.message.id", job_ids[0])


_NO_SEND_SPAN = SendSpan()


@contextlib.contextmanager
def send_span(request: job_service_pb2.EnqueueRequest) -> Iterator[SendSpan]:
    """Runs an enqueue call inside its PRODUCER span and injects the span's context into
    each job of ``request`` (the caller's current context when no SDK is configured)."""
    otel = _otel()
    if otel is None or not request.jobs:
        yield _NO_SEND_SPAN
        return
    queues = {job.queue for job in request.jobs}
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
    }
    name = "send"
    if len(queues) == 1:
        queue = queues.pop()
        attributes["messaging.destination.name"] = queue
        name = f"send {queue}"
    if len(request.jobs) > 1:
        attributes["messaging.batch.message_count"] = len(request.jobs)
    kind = otel.trace.SpanKind.PRODUCER
    with otel.tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
        carrier: dict[str, str] = {}
        otel.propagator.inject(carrier)
        traceparent = carrier.get(TRACEPARENT)
        if traceparent is not None:
            tracestate = fit_tracestate(carrier.get(TRACESTATE, ""))
            context = job_pb2.TraceContext(traceparent=traceparent, tracestate=tracestate)
            for job in request.jobs:
                if not job.HasField("trace_context"):  # a context the caller gave wins
                    job.trace_context.CopyFrom(context)
        yield SendSpan(span) if span.is_recording() else _NO_SEND_SPAN


class _SpanIds(Mapping[str, str]):
    """``trace_id`` and ``span_id`` of a span (lowercase hex), written out when first read:
    when the run logs a line, not for every run (0.2 µs a run instead of 1.1)."""

    __slots__ = ("_ids", "_span")

    def __init__(self, span: Any) -> None:
        self._span = span
        self._ids: Mapping[str, str] | None = None

    def _written(self) -> Mapping[str, str]:
        if self._ids is None:
            context = self._span.get_span_context()
            self._ids = _LOG_FIELDS_OFF
            if context.is_valid:
                self._ids = {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}
        return self._ids

    def __getitem__(self, key: str) -> str:
        return self._written()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._written())

    def __len__(self) -> int:
        return len(self._written())


class RunSpan:
    """A run's CONSUMER span, current for the handler (and its threads) while entered;
    ``log_fields`` name it in the run's log lines, ``finished`` puts the run's outcome
    on it. A plain class rather than a generator: it is on every run's path."""

    __slots__ = ("_current", "_otel", "_span", "_token", "log_fields")

    def __init__(self, otel: _OTel | None = None, span: Any = None, current: Any = None) -> None:
        self._otel = otel
        self._span = span
        self._current = current
        """The context the handler runs in: the span's own (its parent's, and the span)."""
        self._token: object = None
        self.log_fields: Mapping[str, str] = _LOG_FIELDS_OFF if span is None else _SpanIds(span)
        """``trace_id`` and ``span_id`` (lowercase hex) for the run's log lines."""

    def __enter__(self) -> RunSpan:
        if self._otel is not None:
            self._token = self._otel.context.attach(self._current)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: Any) -> None:
        otel = self._otel
        if otel is None:
            return
        otel.context.detach(self._token)
        if error is not None:  # not the handler's (the pipeline reports those): the worker's own
            self._span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, type(error).__name__))
        self._span.end()

    def finished(self, report: RunReport | None) -> None:
        """Puts the run's outcome on the span: a failure's error code as ``error.type``
        and an ERROR status; a run that sends no result (lost, or a handler that would not
        stop) is an error too. Error text stays off the span, as off logs (R-22). A span
        the sampler dropped takes the calls and does nothing with them."""
        span, otel = self._span, self._otel
        if otel is None:
            return
        if report is None:
            span.set_attribute("runwick.outcome", "no_result")
            span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, "no result sent"))
            return
        if report.outcome is Outcome.SUCCEEDED:
            span.set_attribute("runwick.outcome", report.outcome.value)
            return
        attributes = {"runwick.outcome": report.outcome.value, "error.type": report.error_code or "failed"}
        if report.exception_type:
            attributes["exception.type"] = report.exception_type
        span.set_attributes(attributes)
        span.set_status(otel.trace.Status(otel.trace.StatusCode.ERROR, report.error_code))


_NO_RUN_SPAN = RunSpan()


def run_span(assignment: worker_pb.Assignment, ctx: JobContext) -> RunSpan:
    """The CONSUMER span of the run ``ctx`` of ``assignment`` (enter it around the run),
    the child of the trace context the job was enqueued with, or a root span without one.
    The run's IDs are read from ``ctx``, not from the message: 0.36 µs against 0.60 (a
    message's repeated field costs most, tested for emptiness)."""
    otel = _otel()
    if otel is None:
        return _NO_RUN_SPAN
    parent = otel.remote_parent(assignment.trace_context) if assignment.HasField("trace_context") else None
    start = parent or otel.root  # never the worker's own context: a job has its own trace
    queue = ctx.queue
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": ctx.job_id,
        "runwick.attempt_id": ctx.attempt_id,
        "runwick.execution_number": ctx.execution_number,
        "runwick.wire_name": ctx.wire_name,
    }
    span = otel.tracer.start_span(
        f"process {queue}",
        context=start,
        kind=otel.consumer,
        attributes=attributes,
        links=_parent_links(otel, assignment) if ctx.parent_outputs else None,
    )
    return RunSpan(otel, span, otel.trace.set_span_in_context(span, start))


def _parent_links(otel: _OTel, assignment: worker_pb.Assignment) -> list[Any]:
    """Links to the trace contexts the job's parents were enqueued with, as far as the
    coordinator sent them (a parent enqueued without one has none)."""
    links = []
    for parent in assignment.parent_outputs:
        if parent.HasField("trace_context"):
            carried = parent.trace_context
            context = otel.remote_span_context(carried.traceparent, carried.tracestate)
            if context is not None:
                links.append(otel.trace.Link(context, {"messaging.message.id": parent.job_id}))
    return links
