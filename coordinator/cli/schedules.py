"""``runwick schedules create|list|pause|resume|delete``: recurring schedules (R-18)
through the SDK client; changes need the ``manage`` scope, the list ``read``."""

from __future__ import annotations

import argparse
import json

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.output import Column, emit, output_mode, show_time, table, to_json
from worker_sdk import CatchUp, Client, ScheduleInfo

CATCH_UP = [policy.value for policy in CatchUp]


def add_schedules_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedules = commands.add_parser("schedules", help="recurring schedules: cron ticks that enqueue jobs")
    actions = schedules.add_subparsers(dest="schedules_command", required=True)

    create = actions.add_parser("create", help="create a schedule (needs the manage scope)")
    create.add_argument("name", help="unique; letters, digits, '.', '_', '-'")
    create.add_argument(
        "--cron",
        required=True,
        help="5 fields (minute hour day-of-month month day-of-week), 6 with leading seconds, or @daily...",
    )
    create.add_argument("--timezone", required=True, help="IANA time zone, e.g. Europe/Berlin or UTC")
    create.add_argument("--wire-name", required=True, help="job type of the jobs it enqueues")
    create.add_argument("--payload", default="{}", help="JSON payload of each job (default {})")
    create.add_argument("--queue", default="default", help="queue of each job (default: default)")
    create.add_argument(
        "--catch-up",
        choices=CATCH_UP,
        default=CatchUp.SKIP.value,
        help="ticks missed while no coordinator ran: skip them (default) or run_once for the gap",
    )
    add_connection_flags(create)

    listing = actions.add_parser("list", help="list schedules with next runs and skipped ticks (read)")
    add_connection_flags(listing)

    helps = {
        "pause": "stop enqueueing a schedule's ticks (manage)",
        "resume": "enqueue a paused schedule's ticks again, from the next one (manage)",
        "delete": "delete a schedule; the jobs it enqueued stay (manage)",
    }
    for name, text in helps.items():
        parser = actions.add_parser(name, help=text)
        parser.add_argument("name", help="the schedule's name")
        add_connection_flags(parser)


def run_schedules_command(options: argparse.Namespace) -> int:
    def command(client: Client) -> int:
        action = options.schedules_command
        if action == "create":
            return _create(client, options)
        if action == "list":
            return _list(client, options)
        calls = {
            "pause": (client.pause_schedule, "paused"),
            "resume": (client.resume_schedule, "resumed"),
            "delete": (client.delete_schedule, "deleted"),
        }
        call, done = calls[action]
        schedule = call(options.name)
        if output_mode(options) == "json":
            emit({"schedule": to_json(schedule)})
        else:
            print(f"{done} schedule {schedule.name}{_next(schedule) if action == 'resume' else ''}")
        return 0

    return run_client_command(options, command)


def _create(client: Client, options: argparse.Namespace) -> int:
    try:
        json.loads(options.payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--payload is not JSON: {exc}") from exc
    schedule = client.create_schedule(
        options.name,
        cron=options.cron,
        timezone=options.timezone,
        wire_name=options.wire_name,
        payload=options.payload.encode(),
        queue=options.queue,
        catch_up=options.catch_up,
    )
    if output_mode(options) == "json":
        emit({"schedule": to_json(schedule)})
    else:
        print(f"created schedule {schedule.name}{_next(schedule)}")
    return 0


def _next(schedule: ScheduleInfo) -> str:
    if not schedule.next_runs:
        return ": no next run"
    return "; next runs " + ", ".join(show_time(moment, wide=False) for moment in schedule.next_runs)


def _list(client: Client, options: argparse.Namespace) -> int:
    schedules = list(client.list_schedules())
    mode = output_mode(options)
    if mode == "json":
        emit({"schedules": [to_json(s) for s in schedules]})
        return 0
    wide = mode == "wide"
    table(
        [
            Column("name", keep=True),
            Column("cron"),
            Column("timezone", wide_only=True),
            Column("wire name"),
            Column("queue", wide_only=True),
            Column("catch-up", wide_only=True),
            Column("state"),
            Column("next run"),
            Column("last run", wide_only=True),
            Column("skipped", wide_only=True),
        ],
        [
            [
                s.name,
                s.cron,
                s.timezone,
                s.wire_name,
                s.queue,
                s.catch_up.value,
                "paused" if s.paused else "active",
                show_time(s.next_runs[0] if s.next_runs else None, wide=wide),
                show_time(s.last_tick, wide=wide),
                _skipped(s),
            ]
            for s in schedules
        ],
        wide=wide,
    )
    return 0


def _skipped(schedule: ScheduleInfo) -> str:
    if not schedule.skipped_ticks:
        return "-"
    return f"{len(schedule.skipped_ticks)} (newest {show_time(schedule.skipped_ticks[0], wide=False)})"
