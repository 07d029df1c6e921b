"""The ``runwick`` command: serve, migrate, worker, bench, jobs, workers, queues,
schedules, tokens, audit, purge, outbox, completion.

One module per command group: ``serve`` (``serve`` and ``migrate``, with ``bounds`` and
``retention`` for serve's limits and retention), ``worker``, ``bench``, ``jobs`` and
``manage`` (``jobs ...``), ``workers``, ``admin`` (``tokens``, ``audit``), ``queues``,
``schedules``, ``purge``, ``outbox`` (the outbox relay) and ``completion``; client commands connect through
``connect`` and print through ``output``. Server pieces are imported only inside the
functions that run the coordinator or read its database (``serve``, ``bench``), so
the client commands and ``runwick worker`` start without loading the server's
dependencies; ``serve`` and ``migrate`` say what to install when those are missing (an
install of the ``runwick-coordinator`` distribution made with ``--no-deps``).

Every parser is a ``RunwickParser``: abbreviated flags are refused (``--stat`` is not
``--state``). Exit codes: 0 done, 1 the coordinator refused or failed, 2 bad usage or
input, 141 stdout was closed early (``runwick jobs list | head``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, cast

import argcomplete

from coordinator.cli.admin import add_admin_commands, run_admin_command
from coordinator.cli.bench import add_bench_command, run_bench
from coordinator.cli.completion import add_completion_command, run_completion
from coordinator.cli.database import database_refusal
from coordinator.cli.exits import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED
from coordinator.cli.jobs import add_jobs_commands, run_jobs_command
from coordinator.cli.outbox import add_outbox_commands, run_outbox_command
from coordinator.cli.purge import add_purge_command, run_purge
from coordinator.cli.queues import add_queue_commands, run_queue_command
from coordinator.cli.schedules import add_schedules_commands, run_schedules_command
from coordinator.cli.serve import add_serve_commands, run_migrate, run_serve
from coordinator.cli.worker import add_worker_command, run_worker
from coordinator.cli.workers import add_workers_command, run_workers_command

__all__ = ["EXIT_BROKEN_PIPE", "RunwickParser", "build_parser", "main"]

"""As a shell reports a process ended by SIGPIPE."""
COORDINATOR_EXTRA_HINT = (
    "this command needs the coordinator's dependencies: pip install runwick-coordinator"
    " (from a checkout: pip install . ./packaging/coordinator)"
)


class RunwickParser(argparse.ArgumentParser):
    """``argparse`` without abbreviations; subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def runwick_version() -> str:
    try:
        return version("runwick")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``runwick`` argument parser, every command and flag included."""
    parser = RunwickParser(prog="runwick", description="Runwick job coordinator and tools.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"runwick {runwick_version()}",
        help="print the version and exit",
    )
    # Each subcommand's parser is a RunwickParser too (argparse makes them of the
    # parent's class); the adders are typed for the base class.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND"),
    )
    add_serve_commands(commands)
    add_worker_command(commands)
    add_bench_command(commands)
    add_jobs_commands(commands)
    add_workers_command(commands)
    add_admin_commands(commands)
    add_queue_commands(commands)
    add_schedules_commands(commands)
    add_purge_command(commands)
    add_outbox_commands(commands)
    add_completion_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one ``runwick`` command and returns its exit code."""
    parser = build_parser()
    argcomplete.autocomplete(parser)  # answers a shell's completion request and exits
    options = parser.parse_args(argv)
    try:
        code = _run(options)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly. Later flushes (at exit) would
        # fail again, so stdout now points at /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("runwick: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return code


_SERVER_COMMANDS = {"serve": run_serve, "migrate": run_migrate, "bench": run_bench}
_SERVER_MODULES = {
    "sqlalchemy",
    "alembic",
    "psycopg",
    "grpc_health",
    "grpc_reflection",
    "grpc_status",
    "cronsim",
}
"""Server dependencies of runwick-coordinator: missing, the command says to install it."""


def _run(options: argparse.Namespace) -> int:
    command = options.command
    if command in ("serve", "migrate", "bench"):
        try:
            return _SERVER_COMMANDS[command](options)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] in _SERVER_MODULES:
                print(f"runwick: {COORDINATOR_EXTRA_HINT} (missing module {exc.name})", file=sys.stderr)
                return 2
            raise
        except Exception as exc:
            refused = database_refusal(command, options, exc)
            if refused is None:
                raise
            return refused
    if command == "worker":
        return run_worker(options)
    if command in ("tokens", "audit"):
        return run_admin_command(options)
    if command == "queues":
        return run_queue_command(options)
    if command == "schedules":
        return run_schedules_command(options)
    if command == "purge":
        return run_purge(options)
    if command == "workers":
        return run_workers_command(options)
    if command == "completion":
        return run_completion(options)
    if command == "outbox":
        return run_outbox_command(options)
    return run_jobs_command(options)
