"""``runwick jobs enqueue|get|list`` (and ``cancel|retry|reveal-error`` from ``manage``):
tables for people, one JSON object for scripts, every one a call of the SDK's ``Client``."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.durations import DurationError, parse_duration_ms
from coordinator.cli.manage import MANAGE_COMMANDS, add_manage_commands
from coordinator.cli.output import (
    Column,
    emit,
    fields_view,
    output_mode,
    show_age,
    show_bytes,
    show_time,
    table,
    to_json,
)
from worker_sdk import AttemptInfo, Client, JobInfo, JobState

STATES = [state.value for state in JobState]
"""What ``--state`` accepts, in lifecycle order."""
MAX_LIMIT = 500
"""The most ``--limit`` takes: one page of the coordinator's default maximum page size."""
DEFAULT_LIMIT = 50
DEFAULT_WAIT = "60s"
LIBRARY_DEFAULTS = "3 executions, retries after 5s doubling to 60s, no execution timeout"


def limit_type(text: str) -> int:
    """``--limit``: a whole number from 1 to ``MAX_LIMIT``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be 1 to {MAX_LIMIT}, got {value}; for more, follow --page-token or pass --all"
        )
    return value


def duration_type(text: str) -> timedelta:
    """A positive duration: ``500ms``, ``30s``, ``15m``, ``12h``, ``7d``."""
    try:
        ms = parse_duration_ms(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
    return timedelta(milliseconds=ms)


def retry_delay_type(text: str) -> timedelta | tuple[timedelta, timedelta]:
    """``INITIAL`` or ``INITIAL,MAX``."""
    initial, _, maximum = text.partition(",")
    if not maximum:
        return duration_type(initial)
    return duration_type(initial), duration_type(maximum)


def run_at_type(text: str) -> datetime:
    """An ISO 8601 time with a zone; the message says what was wrong and the form."""
    example = "e.g. 2026-12-01T10:00:00Z or 2026-12-01T11:00:00+01:00"
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time; {example}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone; add Z or an offset, {example}")
    return moment


def add_paging_flags(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--limit",
        type=limit_type,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"{what} per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})",
    )
    paging = parser.add_mutually_exclusive_group()
    paging.add_argument(
        "--page-token",
        default="",
        metavar="TOKEN",
        help="the page after the one that printed this token (next_page_token in --json)",
    )
    paging.add_argument("--all", action="store_true", help=f"every page: all matching {what}")


def add_jobs_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = commands.add_parser("jobs", help="enqueue, inspect, cancel and retry jobs")
    actions = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    enqueue = actions.add_parser(
        "enqueue",
        help="enqueue one job by wire name",
        description="Enqueue one job by wire name. The job type's @job declaration is not known "
        "here: settings not given by flags come from the coordinator's job defaults, else the "
        f"library defaults ({LIBRARY_DEFAULTS}).",
    )
    enqueue.add_argument("wire_name", help="the job type's wire name, e.g. payments.capture")
    enqueue.add_argument("--payload", default="{}", help="the payload as JSON (default {})")
    enqueue.add_argument(
        "--payload-version", type=int, default=1, metavar="N", help="the payload's version (default 1)"
    )
    enqueue.add_argument("--queue", default="default", help="the queue to enqueue to (default: default)")
    enqueue.add_argument(
        "--priority", type=int, default=0, metavar="N", help="higher runs first within the queue (default 0)"
    )
    enqueue.add_argument(
        "--run-at",
        type=run_at_type,
        metavar="TIME",
        help="not before this ISO 8601 time with a zone, e.g. 2026-12-01T10:00:00Z (default now)",
    )
    enqueue.add_argument(
        "--idempotency-key", metavar="KEY", help="a second enqueue with this key returns the first job"
    )
    enqueue.add_argument(
        "--unique-key",
        metavar="KEY",
        help="while a job of this wire name with this key has not ended, return it instead of a new one",
    )
    enqueue.add_argument(
        "--parent",
        action="append",
        default=[],
        metavar="ID",
        help="a job that must succeed first (repeat for several); the handler reads its output",
    )
    enqueue.add_argument(
        "--max-executions",
        type=int,
        metavar="N",
        help="started runs allowed, 1 to 100 (default: the coordinator's job defaults, else 3)",
    )
    enqueue.add_argument(
        "--retry-delay",
        type=retry_delay_type,
        metavar="INITIAL[,MAX]",
        help="delay before the first retry, doubling up to MAX, e.g. 10s or 10s,5m "
        "(default: the coordinator's job defaults, else 5s,60s)",
    )
    enqueue.add_argument(
        "--execution-timeout",
        type=duration_type,
        metavar="DURATION",
        help="how long one run may take, e.g. 90s or 10m (default: the coordinator's job defaults, "
        "else none)",
    )
    enqueue.add_argument(
        "--wait",
        nargs="?",
        const=DEFAULT_WAIT,
        type=duration_type,
        metavar="TIMEOUT",
        help=f"wait until the job ends (at most TIMEOUT, default {DEFAULT_WAIT}) and show it as "
        "`jobs get` does; exit 1 unless it succeeded (needs the read scope too)",
    )
    add_connection_flags(enqueue)

    get = actions.add_parser("get", help="show one job (payload and output included) and its attempts")
    get.add_argument("job_id", help="the job's ID")
    add_connection_flags(get)

    listing = actions.add_parser("list", help="list jobs, newest first, a page at a time")
    listing.add_argument("--queue", help="only jobs of this queue")
    listing.add_argument("--state", choices=STATES, help="only jobs in this state")
    listing.add_argument("--wire-name", help="only jobs of this wire name")
    add_paging_flags(listing, "jobs")
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
    item = client.enqueue_raw(
        options.wire_name,
        options.payload.encode(),
        payload_version=options.payload_version,
        queue=options.queue,
        priority=options.priority,
        run_at=options.run_at,
        idempotency_key=options.idempotency_key or None,
        max_executions=options.max_executions,
        parents=options.parent,
        unique_key=options.unique_key or None,
        retry_delay=options.retry_delay,
        execution_timeout=options.execution_timeout,
    )
    if options.wait is not None:
        job = client.wait(item.id, options.wait)
        _show_job(client, job, options, existing=item.existing)
        return 0 if job.state is JobState.SUCCEEDED else 1
    if output_mode(options) == "json":
        emit({"enqueued": to_json(item)})
    else:
        print(f"{item.id}  {item.state.value}{'  (existing)' if item.existing else ''}")
    return 0


def _get(client: Client, options: argparse.Namespace) -> int:
    _show_job(client, client.get(options.job_id), options)
    return 0


def _show_job(
    client: Client, job: JobInfo, options: argparse.Namespace, existing: bool | None = None
) -> None:
    attempts = client.attempts(job.id)
    mode = output_mode(options)
    if mode == "json":
        document: dict[str, object] = {"job": to_json(job), "attempts": [to_json(a) for a in attempts]}
        if existing is not None:
            document["existing"] = existing
        emit(document)
        return
    settings = job.settings
    timeout = settings.execution_timeout
    rows = [
        ("id", job.id),
        ("wire name", job.wire_name),
        ("queue", job.queue),
        ("state", job.state.value + ("  (cancel requested)" if job.cancel_pending else "")),
        ("executions", f"{job.executions} of {settings.max_executions}"),
        ("generation", str(job.generation)),
        ("priority", str(job.priority)),
        (
            "retry delay",
            f"{settings.retry_initial_delay.total_seconds():g}s doubling to "
            f"{settings.retry_max_delay.total_seconds():g}s",
        ),
        ("timeout", f"{timeout.total_seconds():g}s" if timeout is not None else "none"),
        ("progress", job.progress.summary() if job.progress is not None else "-"),
        ("waiting on", job.waiting_reason or "-"),
        ("last error code", job.last_error_code or "-"),
        ("created", show_time(job.created_at)),
        ("run at", show_time(job.run_at)),
        ("finished", show_time(job.finished_at)),
        ("parents", ", ".join(job.parent_ids) or "-"),
        ("children", ", ".join(job.child_ids) or "-"),
        ("payload", show_bytes(job.payload)),
        ("output", show_bytes(job.output)),
    ]
    if existing:
        rows.insert(1, ("existing", "yes: the idempotency or unique key matched this job"))
    fields_view(rows)
    if attempts:
        print()
        _attempts_table(attempts, wide=mode == "wide")


def _attempts_table(attempts: list[AttemptInfo], *, wide: bool) -> None:
    table(
        [
            Column("attempt", keep=True),
            Column("gen", wide_only=True),
            Column("exec"),
            Column("outcome"),
            Column("code"),
            Column("exception type", wide_only=True),
            Column("worker", wide_only=True),
            Column("claimed", wide_only=True),
        ],
        [
            [
                a.id,
                str(a.generation),
                str(a.execution_number or "-"),
                a.outcome.value if a.outcome else "in progress",
                a.error_code or "-",
                a.exception_type or "-",
                a.worker_id,
                show_time(a.claimed_at, wide=wide),
            ]
            for a in attempts
        ],
        wide=wide,
    )


def _list(client: Client, options: argparse.Namespace) -> int:
    filters = {"queue": options.queue, "state": options.state, "wire_name": options.wire_name}
    if options.all:
        jobs = list(client.list_jobs(**filters, page_size=MAX_LIMIT))
        token = ""
    else:
        jobs, token = client.list_jobs_page(**filters, page_size=options.limit, page_token=options.page_token)
    mode = output_mode(options)
    if mode == "json":
        emit({"jobs": [to_json(j) for j in jobs], "next_page_token": token})
        return 0
    wide = mode == "wide"
    table(
        [
            Column("id", keep=True),
            Column("state"),
            Column("wire name"),
            Column("queue"),
            Column("exec"),
            Column("code", wide_only=True),
            Column("priority", wide_only=True),
            Column("created" if wide else "age"),
        ],
        [
            [
                j.id,
                j.state.value,
                j.wire_name,
                j.queue,
                f"{j.executions}/{j.settings.max_executions}",
                j.last_error_code or "-",
                str(j.priority),
                show_time(j.created_at) if wide else show_age(j.created_at),
            ]
            for j in jobs
        ],
        wide=wide,
    )
    if token:
        print(f"more jobs: add --page-token {token} for the next page, or --all", file=sys.stderr)
    return 0
