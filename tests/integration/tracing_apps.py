"""The processes of the traces test (``test_traces``), each exporting its finished spans
as JSON lines to ``TEST_SPANS_FILE`` through a real OpenTelemetry SDK TracerProvider:

- ``app``: an HTTP service (bare ASGI, run by uvicorn) whose ``POST /orders/{number}`` handler
  enqueues a job inside the SERVER span that ``ServerSpans`` opens around each request
  (as an HTTP instrumentation would);
- ``worker``: ``runwick worker tests.integration.tracing_apps:worker``, whose handler
  writes a log line, kept as the SDK's JSON lines in ``TEST_LOG_FILE``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from worker_sdk import AsyncClient, JobContext, Worker, job
from worker_sdk._logging import JsonFormatter

TARGET = os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233")
QUEUE = "orders"


class JsonLinesExporter(SpanExporter):
    """Appends each finished span to a file, one JSON object a line."""

    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(_as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release: each export opens and closes the file."""


def _as_dict(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "service": span.resource.attributes.get("service.name"),
    }


def _install_tracing() -> None:
    spans_file = os.environ.get("TEST_SPANS_FILE")
    if not spans_file:
        return
    resource = Resource.create({"service.name": os.environ.get("TEST_SERVICE", "tests")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(spans_file)))
    trace.set_tracer_provider(provider)


_install_tracing()


@job("tests.traced_order", queue=QUEUE)
@dataclass
class Order:
    number: int


# -- the worker ---------------------------------------------------------------------------

worker = Worker(TARGET, queues=[QUEUE], concurrency=2, drain_timeout=timedelta(seconds=2))
handler_log = logging.getLogger("tests.traced_order")


def _keep_handler_log() -> None:
    log_file = os.environ.get("TEST_LOG_FILE")
    if log_file:
        to_file = logging.FileHandler(log_file)
        to_file.setFormatter(JsonFormatter())
        handler_log.addHandler(to_file)  # on this logger: the worker's logging setup keeps it
        handler_log.setLevel(logging.INFO)


_keep_handler_log()


@worker.handler(Order)
async def charge(payload: Order, ctx: JobContext) -> bytes:
    handler_log.info("charging order %d", payload.number)
    return f"charged {payload.number}".encode()


@job("tests.traced_refund", queue=QUEUE)
@dataclass
class Refund:
    number: int


@worker.handler(Refund)
def refund(payload: Refund, ctx: JobContext) -> None:
    """A sync handler: it runs on the worker's thread pool, its run's span still current."""
    handler_log.info("refunding order %d", payload.number)


# -- the HTTP service ---------------------------------------------------------------------


class OrdersApp:
    """A bare ASGI app (no framework, so no framework's own spans): ``POST /orders/{n}``
    enqueues ``Order(n)`` and answers its job ID as JSON; the lifespan opens the client."""

    def __init__(self) -> None:
        self._client: AsyncClient | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        assert self._client is not None
        number = int(scope["path"].rsplit("/", 1)[-1])
        job_id = await self._client.enqueue(Order(number))
        body = json.dumps({"job_id": job_id}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._client = AsyncClient(TARGET)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


class ServerSpans:
    """ASGI middleware: a SERVER span around each HTTP request, the child of the caller's
    ``traceparent`` header if it sent one (as an HTTP instrumentation would)."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._tracer = trace.get_tracer("tests.tracing_apps")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        name = f"{scope['method']} {scope['path']}"
        with self._tracer.start_as_current_span(
            name, context=propagate.extract(headers), kind=trace.SpanKind.SERVER
        ):
            await self._app(scope, receive, send)


app = ServerSpans(OrdersApp())
