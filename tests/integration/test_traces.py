"""Traces end to end, on both engines: one trace from an HTTP request's SERVER span in a
web process, through the PRODUCER span of its handler's enqueue, to the CONSUMER span of
the run in a worker process, whose handler's log line names that span; GetJob returns
the trace context the job was stored with; a malformed one is INVALID_ARGUMENT and
nothing is written; ``runwick jobs enqueue --traceparent/--tracestate`` (the SDK's
``enqueue_raw``) carries a given one, and refuses a malformed one before any call."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator
from tests.support import (
    ROOT,
    UVICORN_LISTENING,
    WorkerProcess,
    eventually_async,
    free_port,
    reap,
    start_process,
    wait_for_line,
)
from worker_sdk import ArgumentError, AsyncClient, JobState
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc

APP = "tests.integration.tracing_apps"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "rojo=00f067aa0ba902b7"


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _post(url: str) -> dict[str, Any]:
    def call() -> dict[str, Any]:
        request = urllib.request.Request(url, method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=20) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]

    return await asyncio.to_thread(call)


@pytest.mark.slow
async def test_one_trace_from_an_http_request_to_the_workers_handler(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    web_spans, worker_spans, handler_log = tmp_path / "web.jsonl", tmp_path / "worker.jsonl", tmp_path / "log"
    spawn_worker(
        coordinator.target,
        app=f"{APP}:worker",
        test_spans_file=worker_spans,
        test_log_file=handler_log,
        test_service="worker",
    )
    port, web_log = free_port(), tmp_path / "uvicorn.log"
    env = {**os.environ, "RUNWICK_TARGET": coordinator.target, "PYTHONPATH": str(ROOT)}
    env.update(TEST_SPANS_FILE=str(web_spans), TEST_SERVICE="web")
    command = [sys.executable, "-m", "uvicorn", f"{APP}:app", "--host", "127.0.0.1", "--port", str(port)]
    web = start_process(command, web_log, env=env)
    try:
        await wait_for_line(web, web_log, UVICORN_LISTENING)
        job_id = str((await _post(f"http://127.0.0.1:{port}/orders/7"))["job_id"])
        info = await client.wait(job_id, timedelta(seconds=30))
        assert info.state is JobState.SUCCEEDED and info.output == b"charged 7"

        async def process_span_exported() -> bool:
            return any(span["kind"] == "CONSUMER" for span in _spans(worker_spans))

        await eventually_async(process_span_exported, what="the worker exported its run's span")
    finally:
        web.send_signal(signal.SIGTERM)
        await asyncio.to_thread(web.wait, 30)
        reap(web)

    [server] = [span for span in _spans(web_spans) if span["kind"] == "SERVER"]
    [send] = [span for span in _spans(web_spans) if span["kind"] == "PRODUCER"]
    [process] = _spans(worker_spans)
    names = (server["name"], send["name"], process["name"])
    assert names == ("POST /orders/7", "send orders", "process orders")
    assert server["trace_id"] == send["trace_id"] == process["trace_id"]  # one trace
    assert server["parent_span_id"] is None
    assert send["parent_span_id"] == server["span_id"]
    assert process["parent_span_id"] == send["span_id"]
    assert (server["service"], process["service"]) == ("web", "worker")
    [attempt] = await client.attempts(job_id)
    assert process["attributes"] == {
        "messaging.system": "runwick",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "orders",
        "messaging.message.id": job_id,
        "runwick.attempt_id": attempt.id,
        "runwick.execution_number": 1,
        "runwick.wire_name": "tests.traced_order",
        "runwick.outcome": "succeeded",
    }
    assert send["attributes"]["messaging.message.id"] == job_id
    # The job keeps the context its enqueue injected: the send span's.
    assert info.traceparent is not None and info.traceparent[3:52] == f"{send['trace_id']}-{send['span_id']}"
    [line] = [json.loads(text) for text in handler_log.read_text().splitlines()]
    assert line["message"] == "charging order 7"
    ids = (line["job_id"], line["trace_id"], line["span_id"])
    assert ids == (job_id, process["trace_id"], process["span_id"])


@pytest.mark.slow
async def test_a_job_enqueued_without_a_context_runs_in_a_root_span_named_by_its_sync_handlers_logs(
    coordinator: Coordinator, client: AsyncClient, spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """As a schedule's tick's job: no trace context stored, the run's span a root span; a
    sync handler's log line (on the worker's thread pool) still names that span."""
    worker_spans, handler_log = tmp_path / "worker.jsonl", tmp_path / "log"
    spawn_worker(
        coordinator.target, app=f"{APP}:worker", test_spans_file=worker_spans, test_log_file=handler_log
    )
    # Sent as a client without tracing (or the coordinator's schedules) sends it: no context.
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        refund = job_service_pb2.NewJob(
            wire_name="tests.traced_refund", queue="orders", payload=b'{"number":3}'
        )
        request = job_service_pb2.EnqueueRequest(jobs=[refund])
        [enqueued] = (await job_service_pb2_grpc.JobServiceStub(channel).Enqueue(request, timeout=10)).jobs
    job_id = enqueued.id
    info = await client.wait(job_id, timedelta(seconds=30))
    assert info.state is JobState.SUCCEEDED and info.traceparent is None

    async def exported() -> bool:
        return len(_spans(worker_spans)) == 1

    await eventually_async(exported, what="the worker exported its run's span")
    [process] = _spans(worker_spans)
    assert (process["kind"], process["parent_span_id"]) == ("CONSUMER", None)
    assert process["attributes"]["messaging.message.id"] == job_id
    [line] = [json.loads(text) for text in handler_log.read_text().splitlines()]
    assert line["message"] == "refunding order 3"
    ids = (line["job_id"], line["trace_id"], line["span_id"])
    assert ids == (job_id, process["trace_id"], process["span_id"])


def _new_job(**trace_context: str) -> job_service_pb2.NewJob:
    job = job_service_pb2.NewJob(wire_name="tests.echo", queue="traced", payload=b"{}")
    if trace_context:
        job.trace_context.CopyFrom(job_pb2.TraceContext(**trace_context))
    return job


async def test_get_job_returns_the_stored_trace_context(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        request = job_service_pb2.EnqueueRequest(
            jobs=[_new_job(traceparent=TRACEPARENT, tracestate=TRACESTATE), _new_job()]
        )
        traced, untraced = (job.id for job in (await stub.Enqueue(request, timeout=10)).jobs)
        answer = await stub.GetJob(job_service_pb2.GetJobRequest(id=traced), timeout=10)
        plain = await stub.GetJob(job_service_pb2.GetJobRequest(id=untraced), timeout=10)
    assert answer.job.trace_context == job_pb2.TraceContext(traceparent=TRACEPARENT, tracestate=TRACESTATE)
    assert not plain.job.HasField("trace_context")
    info = await client.get(traced)
    assert (info.traceparent, info.tracestate) == (TRACEPARENT, TRACESTATE)
    shown = (await runwick("jobs", "get", traced, "--target", coordinator.target)).stdout.splitlines()
    assert [line.split() for line in shown if line.strip().startswith("trace id")] == [
        ["trace", "id", TRACEPARENT[3:35]]
    ]
    as_json = json.loads(
        (await runwick("jobs", "get", traced, "--json", "--target", coordinator.target)).stdout
    )
    assert (as_json["job"]["traceparent"], as_json["job"]["tracestate"]) == (TRACEPARENT, TRACESTATE)
    assert ((await client.get(untraced)).traceparent, (await client.get(untraced)).tracestate) == (None, None)


@pytest.mark.parametrize(
    ("trace_context", "problem"),
    [
        ({"traceparent": TRACEPARENT[:-1]}, "traceparent must be exactly 55 characters"),
        ({"tracestate": TRACESTATE}, "traceparent must be exactly 55 characters"),
        ({"traceparent": TRACEPARENT, "tracestate": "k=" + "v" * 600}, "tracestate must be at most 512"),
    ],
)
async def test_a_malformed_trace_context_is_invalid_argument_and_nothing_is_written(
    coordinator: Coordinator, client: AsyncClient, trace_context: dict[str, str], problem: str
) -> None:
    request = job_service_pb2.EnqueueRequest(jobs=[_new_job(), _new_job(**trace_context)])
    async with grpc.aio.insecure_channel(coordinator.target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Enqueue(request, timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert "jobs[1].trace_context" in details and problem in details
    assert [job async for job in client.list_jobs(queue="traced")] == []


async def test_runwick_jobs_enqueue_carries_a_given_trace_context(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    target = ("--target", coordinator.target)
    flags = ("--traceparent", TRACEPARENT, "--tracestate", TRACESTATE, "--queue", "traced")
    enqueued = json.loads((await runwick("jobs", "enqueue", "tests.echo", *flags, "--json", *target)).stdout)
    info = await client.get(enqueued["enqueued"]["id"])
    assert (info.traceparent, info.tracestate) == (TRACEPARENT, TRACESTATE)
    alone = json.loads(
        (
            await runwick("jobs", "enqueue", "tests.echo", "--traceparent", TRACEPARENT, "--json", *target)
        ).stdout
    )
    without_state = await client.get(alone["enqueued"]["id"])
    assert (without_state.traceparent, without_state.tracestate) == (TRACEPARENT, None)
    by_sdk = await client.enqueue_raw("tests.echo", b"{}", traceparent=TRACEPARENT, tracestate=TRACESTATE)
    assert (await client.get(by_sdk.id)).traceparent == TRACEPARENT


BAD_TRACE_FLAGS = [
    (("--traceparent", TRACEPARENT[:-1]), "--traceparent must be exactly 55 characters"),
    (("--traceparent", TRACEPARENT.upper()), "--traceparent must be '<version>-<trace-id>"),
    (("--traceparent", "00-" + "0" * 32 + TRACEPARENT[35:]), "must not be all zeros"),
    (("--tracestate", TRACESTATE), "--tracestate needs --traceparent"),
    (("--traceparent", TRACEPARENT, "--tracestate", "k=" + "v" * 600), "--tracestate must be at most 512"),
    (("--traceparent", TRACEPARENT, "--tracestate", "k=\u00e9"), "--tracestate must be printable ASCII"),
]


@pytest.mark.parametrize(("flags", "problem"), BAD_TRACE_FLAGS)
async def test_runwick_jobs_enqueue_refuses_a_malformed_trace_context_in_one_line_and_enqueues_nothing(
    coordinator: Coordinator, client: AsyncClient, flags: tuple[str, ...], problem: str
) -> None:
    refused = await runwick(
        "jobs",
        "enqueue",
        "tests.echo",
        "--queue",
        "traced",
        *flags,
        "--target",
        coordinator.target,
        check=False,
    )
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [refused.stderr.strip()] and problem in refused.stderr
    assert refused.stderr.startswith("runwick: ")
    assert [job async for job in client.list_jobs(queue="traced")] == []


async def test_the_sdks_enqueue_raw_refuses_a_malformed_trace_context_before_any_call(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    with pytest.raises(ArgumentError, match="traceparent must be exactly 55"):
        await client.enqueue_raw("tests.echo", b"{}", queue="traced", traceparent="00-abc")
    with pytest.raises(ArgumentError, match="tracestate needs a traceparent"):
        await client.enqueue_raw("tests.echo", b"{}", queue="traced", tracestate=TRACESTATE)
    assert [job async for job in client.list_jobs(queue="traced")] == []
