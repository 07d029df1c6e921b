"""The ``runwick`` command: serve, migrate, worker, bench, jobs, queues, schedules,
tokens, audit, purge.

One module per command group: ``serve`` (``serve`` and ``migrate``, with ``bounds`` and
``retention`` for serve's limits and retention), ``worker``, ``bench``, ``jobs`` and
``manage`` (``jobs ...``), ``admin`` (``tokens``, ``audit``), ``queues``, ``schedules``
and ``purge``; client commands connect through ``connect`` and print through
``output``. Server pieces are imported only inside the functions that run the
coordinator or read its database (``serve``, ``bench``), so ``runwick jobs`` and
``runwick worker`` work with the SDK-only install (``pip install runwick``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from coordinator.cli.admin import add_admin_commands, run_admin_command
from coordinator.cli.bench import add_bench_command, run_bench
from coordinator.cli.jobs import add_jobs_commands, run_jobs_command
from coordinator.cli.purge import add_purge_command, run_purge
from coordinator.cli.queues import add_queue_commands, run_queue_command
from coordinator.cli.schedules import add_schedules_commands, run_schedules_command
from coordinator.cli.serve import add_serve_commands, run_migrate, run_serve
from coordinator.cli.worker import add_worker_command, run_worker

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``runwick`` argument parser, every command and flag included."""
    parser = argparse.ArgumentParser(prog="runwick", description="Runwick job coordinator and tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_serve_commands(commands)
    add_worker_command(commands)
    add_bench_command(commands)
    add_jobs_commands(commands)
    add_admin_commands(commands)
    add_queue_commands(commands)
    add_schedules_commands(commands)
    add_purge_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one ``runwick`` command and returns its exit code."""
    options = build_parser().parse_args(argv)
    if options.command == "serve":
        return run_serve(options)
    if options.command == "migrate":
        return run_migrate(options)
    if options.command == "worker":
        return run_worker(options)
    if options.command == "bench":
        return run_bench(options)
    if options.command in ("tokens", "audit"):
        return run_admin_command(options)
    if options.command == "queues":
        return run_queue_command(options)
    if options.command == "schedules":
        return run_schedules_command(options)
    if options.command == "purge":
        return run_purge(options)
    return run_jobs_command(options)
