"""How client commands (``runwick jobs|tokens|audit``) reach the coordinator: target,
bearer token and TLS from flags or environment variables, as the SDK's
``ConnectionOptions``, and one SDK ``Client`` per command. SDK-only: no server imports.

The token comes from ``--token``, ``--token-file``, ``RUNWICK_TOKEN`` or
``RUNWICK_TOKEN_FILE``, a flag before a variable. A file keeps it out of the process
list, where ``--token`` shows it to every user of the host.

Exit codes: 0 done, 1 the coordinator refused or failed (``runwick: STATUS: details``
on stderr), 2 bad input found before any call.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import grpc

from coordinator.cli.exits import EXIT_BAD_INPUT, EXIT_REFUSED
from coordinator.cli.output import add_output_flags
from worker_sdk import (
    ArgumentError,
    Client,
    ConnectionOptions,
    CoordinatorUnavailable,
    RunwickError,
    Unauthenticated,
)

DEFAULT_TARGET = "127.0.0.1:7233"


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """``--target``, ``--token`` or ``--token-file``, ``--ca``, ``--cert``, ``--key``,
    ``--tls``, and the output flags ``--output`` and ``--json``."""
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=env("RUNWICK_TARGET", DEFAULT_TARGET),
        help="coordinator host:port [RUNWICK_TARGET]",
    )
    # No defaults from the environment here: ``bearer_token`` reads the variables only
    # when neither flag is given, so a flag always wins and two variables are an error.
    token = parser.add_mutually_exclusive_group()
    token.add_argument(
        "--token",
        help="bearer token with the scope the command needs; other users see it in the process "
        "list, prefer --token-file [RUNWICK_TOKEN]",
    )
    token.add_argument(
        "--token-file",
        metavar="PATH",
        help="a file holding the bearer token (a trailing newline is dropped) [RUNWICK_TOKEN_FILE]",
    )
    parser.add_argument(
        "--ca", default=env("RUNWICK_CA"), help="PEM CA file: speak TLS, trusting this CA [RUNWICK_CA]"
    )
    parser.add_argument(
        "--cert", default=env("RUNWICK_CERT"), help="PEM client certificate for mutual TLS [RUNWICK_CERT]"
    )
    parser.add_argument("--key", default=env("RUNWICK_KEY"), help="PEM key of --cert [RUNWICK_KEY]")
    parser.add_argument(
        "--tls",
        action="store_true",
        default=env("RUNWICK_TLS", "") not in ("", "0", "false"),
        help="speak TLS trusting the system's CAs (implied by --ca/--cert) [RUNWICK_TLS=1]",
    )
    add_output_flags(parser)


def connection_options(options: argparse.Namespace) -> ConnectionOptions:
    """The connection the flags describe; raises ArgumentError (a ValueError) for
    inconsistent TLS flags, unreadable PEM files or a bad token."""
    return ConnectionOptions(
        options.target,
        token=bearer_token(options),
        ca=options.ca,
        cert=options.cert,
        key=options.key,
        tls=options.tls,
    )


def bearer_token(options: argparse.Namespace) -> str | None:
    """The token of ``--token``, ``--token-file``, ``RUNWICK_TOKEN`` or
    ``RUNWICK_TOKEN_FILE`` (the first given), or None; raises ArgumentError when both
    variables are set or the file cannot be read or is empty."""
    if options.token:
        return str(options.token)
    token_file = getattr(options, "token_file", None)  # `bench` has --token only
    if token_file:
        return read_token_file(token_file, "--token-file")
    value, path = os.environ.get("RUNWICK_TOKEN") or None, os.environ.get("RUNWICK_TOKEN_FILE") or None
    if value is not None and path is not None:
        raise ArgumentError("set RUNWICK_TOKEN or RUNWICK_TOKEN_FILE, not both")
    if path is not None:
        return read_token_file(path, "RUNWICK_TOKEN_FILE")
    return value


def read_token_file(path: str, what: str) -> str:
    """The token the file holds, its trailing newline dropped (editors and ``echo`` add
    one). Errors name the file, never its text."""
    try:
        text = Path(path).read_text(encoding="utf-8").rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ArgumentError(f"{what}: cannot read the token file {path}: {reason}") from None
    if not text:
        raise ArgumentError(f"{what}: the token file {path} is empty")
    return text


def failure(error: RunwickError) -> str:
    """``STATUS: details`` of a call the coordinator answered with an error."""
    status = error.status_code.name if error.status_code is not None else "UNKNOWN"
    return f"{status}: {error}"


def run_client_command(options: argparse.Namespace, command: Callable[[Client], int]) -> int:
    """Runs ``command`` with a client of the flags' connection and prints its failures.

    The client has no call deadline: a command waits as long as the coordinator takes.
    """
    try:
        connection = connection_options(options)
        client = Client(connection, rpc_timeout=None)
    except ValueError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with client:
        try:
            return command(client)
        except RunwickError as exc:
            if exc.status_code is None:  # found by the SDK before any call
                print(f"runwick: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
            print(f"runwick: {failure(exc)}", file=sys.stderr)
            if isinstance(exc, Unauthenticated) and connection.token is None:
                print(
                    "runwick: pass a token with --token-file or --token (RUNWICK_TOKEN_FILE, RUNWICK_TOKEN)",
                    file=sys.stderr,
                )
            if isinstance(exc, CoordinatorUnavailable) and exc.reason is None:
                # No answer from a coordinator at all (a refused or failed connection):
                # most often the wrong address.
                print(
                    f"runwick: no coordinator answered at {options.target}: check --target or "
                    "RUNWICK_TARGET (host:port of `runwick serve`) and that it is running",
                    file=sys.stderr,
                )
            # Bad input is bad input whether the command or the coordinator found it.
            return EXIT_BAD_INPUT if exc.status_code == grpc.StatusCode.INVALID_ARGUMENT else EXIT_REFUSED
        except ValueError as exc:
            print(f"runwick: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
