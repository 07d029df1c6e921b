"""``runwick jobs enqueue|get|list|cancel|retry|reveal-error``: tables for people,
``--json`` for scripts."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.cli_connect import add_connection_flags, run_client_command
from worker_sdk.proto.runwick.v1 import job_pb2, job_service_pb2, job_service_pb2_grpc

_STATES = [v.name.removeprefix("JOB_STATE_").lower() for v in job_pb2.JobState.DESCRIPTOR.values][1:]


def add_jobs_commands(commands: Any, *, default_target: str) -> None:
    jobs = commands.add_parser("jobs", help="enqueue and inspect jobs")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)

    def common(parser: argparse.ArgumentParser) -> None:
        add_connection_flags(parser, default_target)

    enqueue = actions.add_parser("enqueue", help="enqueue one job")
    enqueue.add_argument("wire_name")
    enqueue.add_argument("--payload", default="{}", help="JSON payload (default {})")
    enqueue.add_argument("--payload-version", type=int, default=1)
    enqueue.add_argument("--queue", default="default")
    enqueue.add_argument("--priority", type=int, default=0)
    enqueue.add_argument("--run-at", help="ISO 8601 time with zone, e.g. 2026-12-01T10:00:00Z")
    enqueue.add_argument("--idempotency-key")
    enqueue.add_argument("--max-executions", type=int)
    common(enqueue)

    get = actions.add_parser("get", help="show one job and its attempts")
    get.add_argument("job_id")
    common(get)

    listing = actions.add_parser("list", help="list jobs, newest first")
    listing.add_argument("--queue")
    listing.add_argument("--state", choices=_STATES)
    listing.add_argument("--wire-name")
    listing.add_argument("--limit", type=int, default=50)
    common(listing)

    from coordinator.cli_manage import add_manage_commands

    add_manage_commands(actions, common, _STATES)


def run_jobs_command(options: argparse.Namespace) -> int:
    from coordinator.cli_manage import MANAGE_COMMANDS

    def command(channel: grpc.Channel) -> int:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        if options.jobs_command == "enqueue":
            return _enqueue(stub, options)
        if options.jobs_command == "get":
            return _get(stub, options)
        if options.jobs_command in MANAGE_COMMANDS:
            return MANAGE_COMMANDS[options.jobs_command](stub, options)
        return _list(stub, options)

    return run_client_command(options, command)


def _enqueue(stub: job_service_pb2_grpc.JobServiceStub, options: argparse.Namespace) -> int:
    try:
        json.loads(options.payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--payload is not JSON: {exc}") from exc
    job = job_service_pb2.NewJob(
        wire_name=options.wire_name,
        queue=options.queue,
        payload=options.payload.encode(),
        payload_version=options.payload_version,
        priority=options.priority,
        idempotency_key=options.idempotency_key or "",
    )
    if options.run_at:
        moment = datetime.fromisoformat(options.run_at.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            raise ValueError("--run-at needs a time zone, e.g. 2026-12-01T10:00:00Z")
        stamp = Timestamp()
        stamp.FromDatetime(moment.astimezone(UTC))
        job.run_at.CopyFrom(stamp)
    if options.max_executions is not None:
        job.settings.max_executions = options.max_executions
    response = stub.Enqueue(job_service_pb2.EnqueueRequest(jobs=[job]))
    item = response.jobs[0]
    if options.json:
        print(json.dumps({"id": item.id, "existing": item.existing, "state": _state(item.state)}))
    else:
        print(f"{item.id}  {_state(item.state)}{'  (existing)' if item.existing else ''}")
    return 0


def _get(stub: job_service_pb2_grpc.JobServiceStub, options: argparse.Namespace) -> int:
    job = stub.GetJob(job_service_pb2.GetJobRequest(id=options.job_id)).job
    attempts = stub.ListAttempts(job_service_pb2.ListAttemptsRequest(job_id=options.job_id)).attempts
    if options.json:
        print(
            json.dumps(
                {
                    "job": MessageToDict(job, preserving_proto_field_name=True),
                    "attempts": [MessageToDict(a, preserving_proto_field_name=True) for a in attempts],
                }
            )
        )
        return 0
    rows = [
        ("id", job.id),
        ("wire name", job.wire_name),
        ("queue", job.queue),
        ("state", _state(job.state) + ("  (cancel requested)" if job.cancel_requested else "")),
        ("executions", f"{job.executions} of {job.settings.max_executions}"),
        ("generation", str(job.generation)),
        ("last error code", job.last_error_code or "-"),
        ("created", _time(job.created_at)),
        ("run at", _time(job.run_at)),
        ("finished", _time(job.finished_at) if job.HasField("finished_at") else "-"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    if attempts:
        print()
        _table(
            ["attempt", "gen", "exec", "outcome", "code", "exception type", "claimed"],
            [
                [
                    a.id,
                    str(a.generation),
                    str(a.execution_number or "-"),
                    job_pb2.Outcome.Name(a.outcome).removeprefix("OUTCOME_").lower(),
                    a.error_code or "-",
                    a.exception_type or "-",
                    _time(a.claimed_at),
                ]
                for a in attempts
            ],
        )
    return 0


def _list(stub: job_service_pb2_grpc.JobServiceStub, options: argparse.Namespace) -> int:
    request = job_service_pb2.ListJobsRequest(
        queue=options.queue or "",
        wire_name=options.wire_name or "",
        page_size=min(max(options.limit, 1), 500),
    )
    if options.state:
        request.state = job_pb2.JobState.Value(f"JOB_STATE_{options.state.upper()}")  # type: ignore[assignment]
    jobs = list(stub.ListJobs(request).jobs)[: options.limit]
    if options.json:
        print(json.dumps([MessageToDict(j, preserving_proto_field_name=True) for j in jobs]))
        return 0
    _table(
        ["id", "wire name", "queue", "state", "exec", "code", "created"],
        [
            [
                j.id,
                j.wire_name,
                j.queue,
                _state(j.state),
                f"{j.executions}/{j.settings.max_executions}",
                j.last_error_code or "-",
                _time(j.created_at),
            ]
            for j in jobs
        ],
    )
    return 0


def _state(value: int) -> str:
    return job_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def _time(stamp: Timestamp) -> str:
    return stamp.ToDatetime(tzinfo=UTC).isoformat(timespec="milliseconds")


def _table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
