"""Every client command keeps the exit statuses of docs/cli.md (coordinator/cli/exits.py):
2 for bad usage or input, whether the command or the coordinator found it; 1 for a
refusal, a failure or no coordinator at all; a destructive command without ``--yes``
and without a terminal is bad usage (2), like ``purge``.

The table below names a bad input and a refused call for every client command; a command
added without a row fails ``test_every_client_command_has_a_row``."""

from __future__ import annotations

import argparse
import uuid

import pytest

from coordinator.cli import build_parser
from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator

UNKNOWN_JOB = str(uuid.UUID(int=7))
NOWHERE = ("--target", "127.0.0.1:1")
"""No coordinator listens there: the command's call fails (1)."""
SERVER_SIDE = {"serve", "migrate", "worker", "bench", "completion", "outbox relay"}
"""Commands that do not call a coordinator, or run until stopped (a worker, the outbox
relay): their statuses are tested with them."""

# command: (bad input -> 2, a call the coordinator refuses -> 1, or None: no coordinator -> 1)
EXITS: dict[str, tuple[list[str], list[str] | None]] = {
    "jobs enqueue": (["bad name!"], None),
    "jobs get": (["nope"], [UNKNOWN_JOB]),
    "jobs list": (["--limit", "0"], None),
    "jobs cancel": (["nope"], [UNKNOWN_JOB]),
    "jobs retry": (["nope"], [UNKNOWN_JOB]),
    "jobs reveal-error": (["nope"], [UNKNOWN_JOB]),
    "workers list": (["--bogus"], None),
    "tokens create": (["--name", "ok", "--scope", "bogus"], None),
    "tokens list": (["--bogus"], None),
    "tokens revoke": (["nope"], ["0123456789abcdef"]),
    "audit": (["--limit", "0"], None),
    "queues list": (["--bogus"], None),
    "queues get": (["bad name!"], ["nosuchqueue"]),
    "queues pause": (["bad name!"], ["nosuchqueue"]),
    "queues resume": (["bad name!"], ["nosuchqueue"]),
    "queues limit": (["q", "0"], ["nosuchqueue", "3"]),
    "queues rate": (["q", "0/1s"], ["nosuchqueue", "1/1s"]),
    "queues delete": (["bad name!"], ["nosuchqueue"]),
    "schedules create": (["ok", "--cron", "not cron", "--timezone", "UTC", "--wire-name", "a.b"], None),
    "schedules list": (["--bogus"], None),
    "schedules pause": (["bad name!"], ["nosuch"]),
    "schedules resume": (["bad name!"], ["nosuch"]),
    "schedules delete": (["bad name!"], ["nosuch"]),
    "purge": (["--state", "failed", "--older-than", "soon", "--yes"], None),
}
VALID_WITHOUT_COORDINATOR = {
    "jobs enqueue": ["ok.name"],
    "jobs list": [],
    "workers list": [],
    "tokens create": ["--name", "ok", "--scope", "read"],
    "tokens list": [],
    "audit": [],
    "queues list": [],
    "schedules create": ["ok", "--cron", "0 * * * *", "--timezone", "UTC", "--wire-name", "a.b"],
    "schedules list": [],
    "purge": ["--state", "failed", "--older-than", "1d", "--yes"],
}


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[str]:
    subparsers = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subparsers:
        return [" ".join(prefix)]
    return [
        leaf
        for name, child in subparsers[0].choices.items()
        for leaf in leaf_commands(child, (*prefix, name))
    ]


def test_every_client_command_has_a_row() -> None:
    client_commands = {command for command in leaf_commands(build_parser()) if command not in SERVER_SIDE}
    assert client_commands == set(EXITS)
    assert {command for command, (_, refused) in EXITS.items() if refused is None} == set(
        VALID_WITHOUT_COORDINATOR
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_bad_input_is_2_and_a_refusal_is_1_for_every_client_command(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    for command, (bad, refused) in EXITS.items():
        words = command.split()
        result = await runwick(*words, *bad, *target, check=False)
        assert result.returncode == 2, (command, bad, result.stderr)
        assert "Traceback" not in result.stderr
        if refused is not None:
            result = await runwick(*words, *refused, *target, check=False)
        else:
            result = await runwick(*words, *VALID_WITHOUT_COORDINATOR[command], *NOWHERE, check=False)
        assert result.returncode == 1, (command, result.stderr)
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_destructive_commands_without_yes_or_a_terminal_are_bad_usage(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    await runwick("jobs", "enqueue", "ok.name", *target)
    bulk = await runwick("jobs", "cancel", "--state", "available", *target, check=False)
    purge = await runwick("purge", "--state", "failed", "--older-than", "1d", *target, check=False)
    for result in (bulk, purge):
        assert result.returncode == 2, result.stderr
        assert "pass --yes" in result.stderr
    listed = await runwick("jobs", "list", "--state", "available", "--json", *target)
    assert '"state": "available"' in listed.stdout  # nothing was cancelled
