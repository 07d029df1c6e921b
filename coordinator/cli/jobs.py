"""``runwick jobs enqueue|get|list`` (and ``cancel|retry|reveal-error`` from ``manage``):
tables for people, ``--json`` for scripts, every one a call of the SDK's ``Client``."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from itertools import islice

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.manage import MANAGE_COMMANDS, add_manage_commands
from coordinator.cli.output import attempt_json, job_json, show_bytes, show_time, table
from worker_sdk import Client, JobState

STATES = [state.value for state in JobState]
"""What ``--state`` accepts, in lifecycle order."""
_MAX_LIST = 500


def add_jobs_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = commands.add_parser("jobs", help="enqueue and inspect jobs")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)

    enqueue = actions.add_parser("enqueue", help="enqueue one job")
    enqueue.add_argument("wire_name")
    enqueue.add_argument("--payload", default="{}", help="JSON payload (default {})")
    enqueue.add_argument("--payload-version", type=int, default=1)
    enqueue.add_argument("--queue", default="default")
    enqueue.add_argument("--priority", type=int, default=0)
    enqueue.add_argument("--run-at", help="ISO 8601 time with zone, e.g. 2026-12-01T10:00:00Z")
    enqueue.add_argument("--idempotency-key")
    enqueue.add_argument(
        "--unique-key",
        help="while a job of this wire name with this key has not ended, return it instead of a new one",
    )
    enqueue.add_argument(
        "--parent",
        action="append",
        default=[],
        metavar="ID",
        help="a job that must succeed first (repeat for several); the handler reads its output",
    )
    enqueue.add_argument("--max-executions", type=int)
    add_connection_flags(enqueue)

    get = actions.add_parser("get", help="show one job and its attempts")
    get.add_argument("job_id")
    add_connection_flags(get)

    listing = actions.add_parser("list", help="list jobs, newest first")
    listing.add_argument("--queue")
    listing.add_argument("--state", choices=STATES)
    listing.add_argument("--wire-name")
    listing.add_argument("--limit", type=int, default=50)
    add_connection_flags(listing)

    add_manage_commands(actions, STATES)


def run_jobs_command(options: argparse.Namespace) -> int:
    def command(client: Client) -> int:
        if options.jobs_command == "enqueue":
            return _enqueue(client, options)
        if options.jobs_command == "get":
            return _get(client, options)
        if options.jobs_command in MANAGE_COMMANDS:
            return MANAGE_COMMANDS[options.jobs_command](client, options)
        return _list(client, options)

    return run_client_command(options, command)


def _enqueue(client: Client, options: argparse.Namespace) -> int:
    try:
        json.loads(options.payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--payload is not JSON: {exc}") from exc
    run_at = None
    if options.run_at:
        run_at = datetime.fromisoformat(options.run_at.replace("Z", "+00:00"))
        if run_at.tzinfo is None:
            raise ValueError("--run-at needs a time zone, e.g. 2026-12-01T10:00:00Z")
    item = client.enqueue_raw(
        options.wire_name,
        options.payload.encode(),
        payload_version=options.payload_version,
        queue=options.queue,
        priority=options.priority,
        run_at=run_at,
        idempotency_key=options.idempotency_key or None,
        max_executions=options.max_executions,
        parents=options.parent,
        unique_key=options.unique_key or None,
    )
    if options.json:
        print(json.dumps({"id": item.id, "existing": item.existing, "state": item.state.value}))
    else:
        print(f"{item.id}  {item.state.value}{'  (existing)' if item.existing else ''}")
    return 0


def _get(client: Client, options: argparse.Namespace) -> int:
    job = client.get(options.job_id)
    attempts = client.attempts(options.job_id)
    if options.json:
        print(json.dumps({"job": job_json(job), "attempts": [attempt_json(a) for a in attempts]}))
        return 0
    rows = [
        ("id", job.id),
        ("wire name", job.wire_name),
        ("queue", job.queue),
        ("state", job.state.value + ("  (cancel requested)" if job.cancel_requested else "")),
        ("executions", f"{job.executions} of {job.settings.max_executions}"),
        ("generation", str(job.generation)),
        ("last error code", job.last_error_code or "-"),
        ("created", show_time(job.created_at)),
        ("run at", show_time(job.run_at)),
        ("finished", show_time(job.finished_at) if job.finished_at else "-"),
        ("parents", ", ".join(job.parent_ids) or "-"),
        ("children", ", ".join(job.child_ids) or "-"),
        ("output", show_bytes(job.output)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    if attempts:
        print()
        table(
            ["attempt", "gen", "exec", "outcome", "code", "exception type", "claimed"],
            [
                [
                    a.id,
                    str(a.generation),
                    str(a.execution_number or "-"),
                    a.outcome.value if a.outcome else "unspecified",
                    a.error_code or "-",
                    a.exception_type or "-",
                    show_time(a.claimed_at),
                ]
                for a in attempts
            ],
        )
    return 0


def _list(client: Client, options: argparse.Namespace) -> int:
    listed = client.list_jobs(
        queue=options.queue,
        state=options.state,
        wire_name=options.wire_name,
        page_size=min(max(options.limit, 1), _MAX_LIST),
    )
    # At least one job is asked for, so the first page is always fetched (and a refused
    # call reported) even for --limit 0.
    jobs = list(islice(listed, max(options.limit, 1)))[: max(options.limit, 0)]
    if options.json:
        print(json.dumps([job_json(j) for j in jobs]))
        return 0
    table(
        ["id", "wire name", "queue", "state", "exec", "code", "created"],
        [
            [
                j.id,
                j.wire_name,
                j.queue,
                j.state.value,
                f"{j.executions}/{j.settings.max_executions}",
                j.last_error_code or "-",
                show_time(j.created_at),
            ]
            for j in jobs
        ],
    )
    return 0
