"""How client commands (``runwick jobs|tokens|audit``) reach the coordinator: target,
bearer token and TLS from flags or environment variables, as the SDK's
``ConnectionOptions``, and one SDK ``Client`` per command. SDK-only: no server imports.

Exit codes: 0 done, 1 the coordinator refused or failed (``runwick: STATUS: details``
on stderr), 2 bad input found before any call.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import grpc

from coordinator.cli.exits import EXIT_BAD_INPUT, EXIT_REFUSED
from coordinator.cli.output import add_output_flags
from worker_sdk import Client, ConnectionOptions, CoordinatorUnavailable, RunwickError, Unauthenticated

DEFAULT_TARGET = "127.0.0.1:7233"


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """``--target``, ``--token``, ``--ca``, ``--cert``, ``--key``, ``--tls``, and the
    output flags ``--output`` and ``--json``."""
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=env("RUNWICK_TARGET", DEFAULT_TARGET),
        help="coordinator host:port [RUNWICK_TARGET]",
    )
    parser.add_argument(
        "--token",
        default=env("RUNWICK_TOKEN"),
        help="bearer token with the scope the command needs [RUNWICK_TOKEN]",
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
        token=options.token or None,
        ca=options.ca,
        cert=options.cert,
        key=options.key,
        tls=options.tls,
    )


def failure(error: RunwickError) -> str:
    """``STATUS: details`` of a call the coordinator answered with an error."""
    status = error.status_code.name if error.status_code is not None else "UNKNOWN"
    return f"{status}: {error}"


def run_client_command(options: argparse.Namespace, command: Callable[[Client], int]) -> int:
    """Runs ``command`` with a client of the flags' connection and prints its failures.

    The client has no call deadline: a command waits as long as the coordinator takes.
    """
    try:
        client = Client(connection_options(options), rpc_timeout=None)
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
            if isinstance(exc, Unauthenticated) and not options.token:
                print("runwick: pass a token with --token or RUNWICK_TOKEN", file=sys.stderr)
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
