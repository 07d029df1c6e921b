"""How client commands (``runwick jobs|tokens|audit``) reach the coordinator: target,
bearer token and TLS, from flags or environment variables. SDK-only: no server imports.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from worker_sdk import ArgumentError, ConnectionOptions

DEFAULT_TARGET = "127.0.0.1:7233"


def add_connection_flags(parser: argparse.ArgumentParser, default_target: str | None = None) -> None:
    """``--target``, ``--token``, ``--ca``, ``--cert``, ``--key``, ``--tls`` and ``--json``."""
    env = os.environ.get
    parser.add_argument(
        "--target",
        default=default_target or env("RUNWICK_TARGET", DEFAULT_TARGET),
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
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


if TYPE_CHECKING:
    _Interceptor = grpc.UnaryUnaryClientInterceptor[Any, Any]
else:
    _Interceptor = grpc.UnaryUnaryClientInterceptor


class _Bearer(_Interceptor):
    """Adds the bearer token to every call."""

    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], client_call_details: Any, request: Any
    ) -> Any:
        details = client_call_details._replace(
            metadata=[*(client_call_details.metadata or ()), *self.metadata]
        )
        return continuation(details, request)


def open_channel(options: argparse.Namespace) -> grpc.Channel:
    """The channel the flags describe; raises ValueError for inconsistent TLS flags."""
    try:
        connection = ConnectionOptions(
            options.target,
            token=options.token or None,
            ca=options.ca,
            cert=options.cert,
            key=options.key,
            tls=options.tls,
        )
    except ArgumentError as exc:
        raise ValueError(str(exc)) from exc
    channel = connection.open_channel()
    metadata = connection.metadata
    return grpc.intercept_channel(channel, _Bearer(metadata)) if metadata else channel


def run_client_command(options: argparse.Namespace, command: Callable[[grpc.Channel], int]) -> int:
    """Runs ``command`` on a channel, printing gRPC failures as ``STATUS: details``."""
    try:
        channel = open_channel(options)
    except ValueError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    with channel:
        try:
            return command(channel)
        except grpc.RpcError as exc:
            print(f"runwick: {exc.code().name}: {exc.details()}", file=sys.stderr)
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED and not options.token:
                print("runwick: pass a token with --token or RUNWICK_TOKEN", file=sys.stderr)
            return 1
        except ValueError as exc:
            print(f"runwick: {exc}", file=sys.stderr)
            return 2
