"""The SDK's spans (``worker_sdk._tracing``), collected with the OpenTelemetry SDK's
in-memory exporter: an enqueue's PRODUCER span and the context it injects into each job,
a run's CONSUMER span as that context's child with the messaging attributes, its outcome,
its links to the parents' contexts, and the trace IDs of its log lines. Without
OpenTelemetry (or with ``RUNWICK_OTEL=off``) nothing is imported and nothing changes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags, TraceState

from tests.support import ROOT
from worker_sdk import _tracing
from worker_sdk._context import JobContext
from worker_sdk._logging import JsonFormatter, job_log_context
from worker_sdk._pipeline import RunReport
from worker_sdk._results import Outcome
from worker_sdk.proto.runwick.v1 import job_service_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as worker_pb

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PARENT_TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel = _tracing._OTel(provider)
    monkeypatch.setattr(_tracing, "_otel", lambda: otel)
    yield provider, exporter
    provider.shutdown()


@pytest.fixture
def spans(provider: tuple[TracerProvider, InMemorySpanExporter]) -> InMemorySpanExporter:
    return provider[1]


def _request(*queues: str) -> job_service_pb2.EnqueueRequest:
    request = job_service_pb2.EnqueueRequest()
    for queue in queues:
        request.jobs.add(wire_name="tests.echo", queue=queue, payload=b"{}")
    return request


def _only(spans: InMemorySpanExporter) -> ReadableSpan:
    [span] = spans.get_finished_spans()
    return span


def test_an_enqueue_is_a_producer_span_whose_context_each_job_carries(spans: InMemorySpanExporter) -> None:
    request = _request("emails")
    with _tracing.send_span(request) as sending:
        sending.enqueued(["01900000-0000-7000-8000-000000000001"])
    span = _only(spans)
    assert (span.name, span.kind) == ("send emails", SpanKind.PRODUCER)
    assert dict(span.attributes or {}) == {
        "messaging.system": "runwick",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "emails",
        "messaging.message.id": "01900000-0000-7000-8000-000000000001",
    }
    context = span.get_span_context()
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert request.jobs[0].trace_context.traceparent == expected
    assert request.jobs[0].trace_context.tracestate == ""


def test_an_applications_tracestate_over_the_bound_is_cut_not_sent_to_be_refused(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    members = ",".join(f"vendor{n:02d}=" + "v" * 100 for n in range(8))  # 8 x 109 chars
    upstream = SpanContext(
        TRACE_ID,
        SPAN_ID,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState.from_header([members]),
    )
    request = _request("q")
    with trace.use_span(NonRecordingSpan(upstream)), _tracing.send_span(request):
        pass
    tracestate = request.jobs[0].trace_context.tracestate
    assert tracestate and len(tracestate.encode()) <= 512
    assert tracestate == ",".join(members.split(",")[:4])


def test_a_context_the_caller_gave_is_kept_not_replaced_by_the_send_spans(
    spans: InMemorySpanExporter,
) -> None:
    """``enqueue_raw(traceparent=...)`` (``runwick jobs enqueue --traceparent``): the job
    joins the trace it names, whatever span is current where it is enqueued."""
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    request = _request("q", "q")
    request.jobs[0].trace_context.traceparent = given
    with _tracing.send_span(request):
        pass
    assert request.jobs[0].trace_context.traceparent == given
    context = _only(spans).get_span_context()
    assert request.jobs[1].trace_context.traceparent == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    )


def test_a_batch_over_several_queues_is_one_send_span_without_a_destination(
    spans: InMemorySpanExporter,
) -> None:
    request = _request("a", "b", "a")
    with _tracing.send_span(request) as sending:
        sending.enqueued(["x", "y", "z"])
    span = _only(spans)
    assert span.name == "send"
    attributes = dict(span.attributes or {})
    assert attributes["messaging.batch.message_count"] == 3
    assert "messaging.destination.name" not in attributes and "messaging.message.id" not in attributes
    assert len({job.trace_context.traceparent for job in request.jobs}) == 1


def test_the_send_span_is_a_child_of_the_callers_span(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer, spans = provider[0].get_tracer("tests"), provider[1]
    server_span = tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER)
    with server_span as request_span, _tracing.send_span(_request("orders")):
        pass
    send, server = spans.get_finished_spans()
    assert server.get_span_context().span_id == request_span.get_span_context().span_id
    assert send.parent is not None and send.parent.span_id == server.get_span_context().span_id
    assert send.get_span_context().trace_id == server.get_span_context().trace_id


def test_a_failed_enqueue_is_an_error_span_and_the_error_goes_on(spans: InMemorySpanExporter) -> None:
    with pytest.raises(ConnectionError), _tracing.send_span(_request("q")):
        raise ConnectionError("coordinator unavailable")
    span = _only(spans)
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


def test_without_an_sdk_the_callers_context_is_injected_and_no_span_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    otel = _tracing._OTel(trace.NoOpTracerProvider())
    monkeypatch.setattr(_tracing, "_otel", lambda: otel)
    upstream = SpanContext(TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1))
    request, untraced = _request("q"), _request("q")
    with trace.use_span(NonRecordingSpan(upstream)), _tracing.send_span(request):
        pass
    with _tracing.send_span(untraced):
        pass
    assert request.jobs[0].trace_context.traceparent == TRACEPARENT
    assert not untraced.jobs[0].HasField("trace_context")


def _assignment(traceparent: str | None = TRACEPARENT, tracestate: str = "") -> worker_pb.Assignment:
    assignment = worker_pb.Assignment(
        job_id="01900000-0000-7000-8000-000000000001",
        attempt_id="01900000-0000-7000-8000-0000000000a1",
        wire_name="emails.send",
        queue="emails",
        execution_number=2,
    )
    if traceparent is not None:
        assignment.trace_context.traceparent = traceparent
        assignment.trace_context.tracestate = tracestate
    return assignment


def _run(assignment: worker_pb.Assignment, execution_number: int) -> JobContext:
    """The run's context, as the worker makes it from ``assignment``."""
    return JobContext(
        job_id=assignment.job_id,
        attempt_id=assignment.attempt_id,
        wire_name=assignment.wire_name,
        queue=assignment.queue,
        execution_number=execution_number,
        max_executions=3,
        generation=1,
        parent_outputs={parent.job_id: parent.output for parent in assignment.parent_outputs},
    )


def test_a_run_is_a_consumer_span_child_of_the_enqueuers_context(spans: InMemorySpanExporter) -> None:
    assignment = _assignment(tracestate="rojo=1")
    with _tracing.run_span(assignment, _run(assignment, 2)) as run:
        assert trace.get_current_span().get_span_context().trace_id == TRACE_ID  # current for the handler
        run.finished(RunReport(Outcome.SUCCEEDED))
    span = _only(spans)
    assert (span.name, span.kind) == ("process emails", SpanKind.CONSUMER)
    assert span.parent is not None and (span.parent.trace_id, span.parent.span_id) == (TRACE_ID, SPAN_ID)
    assert span.get_span_context().trace_state.get("rojo") == "1"
    assert dict(span.attributes or {}) == {
        "messaging.system": "runwick",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "emails",
        "messaging.message.id": "01900000-0000-7000-8000-000000000001",
        "runwick.attempt_id": "01900000-0000-7000-8000-0000000000a1",
        "runwick.execution_number": 2,
        "runwick.wire_name": "emails.send",
        "runwick.outcome": "succeeded",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_a_job_without_a_context_runs_in_a_root_span_whatever_is_current(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    loop_span = provider[0].get_tracer("tests").start_as_current_span("worker loop")
    assignment = _assignment(traceparent=None)
    with loop_span, _tracing.run_span(assignment, _run(assignment, 1)) as run:
        run.finished(RunReport(Outcome.SUCCEEDED))
    process = next(span for span in provider[1].get_finished_spans() if span.name == "process emails")
    assert process.parent is None


@pytest.mark.parametrize(
    ("report", "error_type", "description"),
    [
        (RunReport(Outcome.PERMANENT_FAILURE, error_code="card_declined"), "card_declined", "card_declined"),
        (
            RunReport(Outcome.RETRYABLE_FAILURE, error_code="ValueError", exception_type="ValueError"),
            "ValueError",
            "ValueError",
        ),
        (RunReport(Outcome.TIMED_OUT, error_code="timeout"), "timeout", "timeout"),
        (None, None, "no result sent"),
    ],
)
def test_a_run_that_did_not_succeed_is_an_error_span_with_its_code(
    spans: InMemorySpanExporter, report: RunReport | None, error_type: str | None, description: str
) -> None:
    assignment = _assignment()
    with _tracing.run_span(assignment, _run(assignment, 1)) as run:
        run.finished(report)
    span = _only(spans)
    attributes = dict(span.attributes or {})
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == description
    assert attributes.get("error.type") == error_type
    assert attributes["runwick.outcome"] == (report.outcome.value if report else "no_result")
    if report is not None and report.exception_type:
        assert attributes["exception.type"] == report.exception_type


def test_a_childs_run_links_to_its_parents_contexts(spans: InMemorySpanExporter) -> None:
    assignment = _assignment()
    traced = assignment.parent_outputs.add(job_id="01900000-0000-7000-8000-0000000000b1", output=b"")
    traced.trace_context.traceparent = PARENT_TRACEPARENT
    assignment.parent_outputs.add(job_id="01900000-0000-7000-8000-0000000000b2", output=b"")  # none
    with _tracing.run_span(assignment, _run(assignment, 1)) as run:
        run.finished(RunReport(Outcome.SUCCEEDED))
    [link] = _only(spans).links
    assert f"{link.context.trace_id:032x}" == PARENT_TRACEPARENT[3:35]
    assert dict(link.attributes or {}) == {"messaging.message.id": "01900000-0000-7000-8000-0000000000b1"}


@pytest.fixture
def json_lines() -> Iterator[list[dict[str, str]]]:
    """The JSON lines logged to ``tests.tracing.handler`` meanwhile."""
    formatter, lines = JsonFormatter(), []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(formatter.format(record)))

    logger = logging.getLogger("tests.tracing.handler")
    handler = Collect()
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


def test_a_runs_log_lines_carry_its_trace_and_span_ids(
    spans: InMemorySpanExporter, json_lines: list[dict[str, str]]
) -> None:
    logger = logging.getLogger("tests.tracing.handler")
    assignment = _assignment()
    run_span = _tracing.run_span(assignment, _run(assignment, 1))
    with run_span as run, job_log_context(run.log_fields, job_id="j-1"):
        logger.warning("charging the card")
        with job_log_context(queue="emails"):  # a context inside the run's keeps its span's IDs
            logger.warning("card charged")
        run.finished(RunReport(Outcome.SUCCEEDED))
    logger.warning("after the run")
    context = _only(spans).get_span_context()
    ids = {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}
    first, nested, after = json_lines
    assert (first["job_id"], first["trace_id"], first["span_id"]) == ("j-1", ids["trace_id"], ids["span_id"])
    assert (nested["job_id"], nested["queue"], nested["span_id"]) == ("j-1", "emails", ids["span_id"])
    assert "trace_id" not in after and "job_id" not in after
    assert dict(run.log_fields) == ids  # as written out for the lines, for any other reader


def test_runs_one_after_another_each_get_their_own_parent_whatever_the_last_one_had(
    spans: InMemorySpanExporter,
) -> None:
    """The last parent is kept for the jobs of one enqueue call: a run of another
    context, or of none, must not get it."""
    other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    contexts = [TRACEPARENT, TRACEPARENT, other, None, TRACEPARENT]
    for traceparent in contexts:
        assignment = _assignment(traceparent=traceparent)
        with _tracing.run_span(assignment, _run(assignment, 1)) as run:
            run.finished(RunReport(Outcome.SUCCEEDED))
    parents = [span.parent for span in spans.get_finished_spans()]
    got = [
        None if parent is None else f"00-{parent.trace_id:032x}-{parent.span_id:016x}-01"
        for parent in parents
    ]
    assert got == contexts


_EXERCISE = """
import sys
{prelude}
from worker_sdk import _tracing
from worker_sdk._context import JobContext
from worker_sdk._pipeline import RunReport
from worker_sdk._results import Outcome
from worker_sdk.proto.runwick.v1 import job_service_pb2, worker_service_pb2
def loaded():
    return sorted(m for m, module in sys.modules.items() if module and m.split(".")[0] == "opentelemetry")
assert not loaded(), "imported at import time"
request = job_service_pb2.EnqueueRequest()
request.jobs.add(wire_name="w", queue="q")
with _tracing.send_span(request) as span:
    span.enqueued(["id"])
assignment = worker_service_pb2.Assignment(job_id="j", attempt_id="a", wire_name="w", queue="q")
assignment.trace_context.traceparent = "{traceparent}"
ctx = JobContext(
    job_id="j", attempt_id="a", wire_name="w", queue="q", execution_number=1, max_executions=1, generation=1
)
with _tracing.run_span(assignment, ctx) as run:
    run.finished(RunReport(Outcome.PERMANENT_FAILURE, error_code="x"))
assert dict(run.log_fields) == {{}}
assert not request.jobs[0].HasField("trace_context")
print(loaded())
"""


def _exercise(prelude: str, **env: str) -> str:
    code = textwrap.dedent(_EXERCISE).format(prelude=prelude, traceparent=TRACEPARENT)
    environment = {key: value for key, value in os.environ.items() if key != _tracing.DISABLE_ENV}
    environment.update(PYTHONPATH=str(ROOT), **env)
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_without_opentelemetry_nothing_is_imported_and_nothing_changes() -> None:
    # sys.modules[name] = None makes every import of it fail, as when it is not installed.
    assert _exercise('sys.modules["opentelemetry"] = None') == "[]"


def test_runwick_otel_off_keeps_the_sdk_from_importing_it() -> None:
    assert _exercise("", RUNWICK_OTEL="off") == "[]"


def test_importing_the_sdk_imports_no_opentelemetry_until_the_first_enqueue_or_run() -> None:
    code = (
        "import sys, worker_sdk, worker_sdk.testing\n"
        "from worker_sdk import Client, Worker\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))"
    )
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr
