"""``runwick purge --state S --older-than DURATION [--yes]``: one purge now, as retention
does it (R-19), through the SDK client's ``purge_jobs`` (needs the ``admin`` scope).

Without ``--yes`` it asks first, on a terminal; with stdin not a terminal it refuses
(exit 2) rather than purge unasked.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.durations import EXAMPLES, DurationError, format_duration_ms, parse_duration_ms
from coordinator.cli.exits import confirmed
from coordinator.cli.output import emit, output_mode
from worker_sdk import Client

PURGEABLE_STATES = ("succeeded", "failed", "cancelled")


def add_purge_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    purge = commands.add_parser(
        "purge",
        help="remove finished jobs older than an age now, with their attempts and history "
        "(R-19; needs admin; audited)",
    )
    purge.add_argument("--state", required=True, choices=PURGEABLE_STATES, help="the jobs' terminal state")
    purge.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help=f"finished more than this long ago: {EXAMPLES}; 0 = every {'/'.join(PURGEABLE_STATES)} job",
    )
    purge.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    add_connection_flags(purge)


def run_purge(options: argparse.Namespace) -> int:
    try:
        older_than_ms = parse_duration_ms(options.older_than)
    except DurationError as exc:
        print(f"runwick: --older-than: {exc}", file=sys.stderr)
        return 2
    age = format_duration_ms(older_than_ms)
    what = (
        f"{options.state} jobs that finished more than {age} ago"
        if older_than_ms
        else (f"every {options.state} job")
    )

    def command(client: Client) -> int:
        if not options.yes:
            refused = confirmed(
                f"Purge {what}, with their attempts and history? This cannot be undone.",
                refusal_without_terminal=f"purge removes {what} for good",
            )
            if refused is not None:
                return refused
        purged = client.purge_jobs(options.state, timedelta(milliseconds=older_than_ms))
        if output_mode(options) == "json":
            emit({"purged": purged, "state": options.state, "older_than_s": older_than_ms / 1000})
        else:
            print(f"purged {purged} {options.state} job(s)")
        return 0

    return run_client_command(options, command)
