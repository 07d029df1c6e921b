"""``runwick tokens create|list|revoke`` and ``runwick audit``: AdminService over gRPC,
with a token that has the ``admin`` scope. Also the security flags of ``runwick serve``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

from coordinator.cli_connect import add_connection_flags, run_client_command
from worker_sdk.proto.runwick.v1 import admin_service_pb2, admin_service_pb2_grpc

SCOPES = ("enqueue", "read", "manage", "reveal", "work", "admin")
BOOTSTRAP_BANNER = "runwick bootstrap admin token (shown once; store it now):"


def add_admin_commands(commands: Any, *, default_target: str) -> None:
    tokens = commands.add_parser("tokens", help="create, list and revoke API tokens (needs admin)")
    actions = tokens.add_subparsers(dest="tokens_command", required=True)
    create = actions.add_parser("create", help="create a token; its secret is printed once")
    create.add_argument("--name", required=True, help="a label for people, e.g. billing-worker")
    create.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        required=True,
        help=f"repeat or comma-separate: {', '.join(SCOPES)}",
    )
    create.add_argument(
        "--queue",
        dest="queues",
        action="append",
        default=[],
        help="work tokens: a queue the worker may take jobs from (repeatable; default any)",
    )
    add_connection_flags(create, default_target)
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    add_connection_flags(listing, default_target)
    revoke = actions.add_parser("revoke", help="revoke a token by its ID")
    revoke.add_argument("token_id")
    add_connection_flags(revoke, default_target)

    audit = commands.add_parser("audit", help="list audit events, newest first (needs admin)")
    audit.add_argument("--action", help="only this action, e.g. attempt.reveal_error")
    audit.add_argument("--about", help="only events about this job, attempt or token ID")
    audit.add_argument("--limit", type=int, default=50)
    add_connection_flags(audit, default_target)


def run_admin_command(options: argparse.Namespace) -> int:
    def command(channel: grpc.Channel) -> int:
        stub = admin_service_pb2_grpc.AdminServiceStub(channel)
        if options.command == "audit":
            return _audit(stub, options)
        if options.tokens_command == "create":
            return _create(stub, options)
        if options.tokens_command == "list":
            return _list(stub, options)
        return _revoke(stub, options)

    return run_client_command(options, command)


def _create(stub: admin_service_pb2_grpc.AdminServiceStub, options: argparse.Namespace) -> int:
    scopes = [s.strip() for value in options.scopes for s in value.split(",") if s.strip()]
    queues = [q.strip() for value in options.queues for q in value.split(",") if q.strip()]
    response = stub.CreateToken(
        admin_service_pb2.CreateTokenRequest(name=options.name, scopes=scopes, queues=queues)
    )
    if options.json:
        token = MessageToDict(response.token, preserving_proto_field_name=True)
        print(json.dumps({"token": token, "secret": response.secret}))
        return 0
    token = response.token
    print(f"created token {token.id} ({token.name}): scopes {','.join(token.scopes)}", file=sys.stderr)
    print("the secret below is shown only now:", file=sys.stderr)
    print(response.secret)
    return 0


def _list(stub: admin_service_pb2_grpc.AdminServiceStub, options: argparse.Namespace) -> int:
    tokens = stub.ListTokens(admin_service_pb2.ListTokensRequest(include_revoked=options.all)).tokens
    if options.json:
        print(json.dumps([MessageToDict(t, preserving_proto_field_name=True) for t in tokens]))
        return 0
    _table(
        ["id", "name", "scopes", "queues", "created", "revoked"],
        [
            [
                t.id,
                t.name,
                ",".join(t.scopes),
                ",".join(t.queues) or "-",
                _time(t.created_at),
                _time(t.revoked_at) if t.HasField("revoked_at") else "-",
            ]
            for t in tokens
        ],
    )
    return 0


def _revoke(stub: admin_service_pb2_grpc.AdminServiceStub, options: argparse.Namespace) -> int:
    token = stub.RevokeToken(admin_service_pb2.RevokeTokenRequest(id=options.token_id)).token
    if options.json:
        print(json.dumps(MessageToDict(token, preserving_proto_field_name=True)))
    else:
        print(f"revoked token {token.id} ({token.name})")
    return 0


def _audit(stub: admin_service_pb2_grpc.AdminServiceStub, options: argparse.Namespace) -> int:
    limit = max(options.limit, 1)
    request = admin_service_pb2.ListAuditEventsRequest(
        page_size=min(limit, 500), action=options.action or "", target=options.about or ""
    )
    events: list[admin_service_pb2.AuditEvent] = []
    while len(events) < limit:
        page = stub.ListAuditEvents(request)
        events.extend(page.events)
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    events = events[:limit]
    if options.json:
        print(json.dumps([MessageToDict(e, preserving_proto_field_name=True) for e in events]))
        return 0
    _table(
        ["time", "actor", "action", "target", "peer", "detail"],
        [
            [
                _time(e.at),
                f"{e.actor_name} ({e.actor_token_id})" if e.actor_token_id else e.actor_name,
                e.action,
                e.target,
                e.peer,
                e.detail or "-",
            ]
            for e in events
        ],
    )
    return 0


# -- runwick serve ----------------------------------------------------------------------


def add_serve_security_flags(serve: argparse.ArgumentParser) -> None:
    env = os.environ.get
    serve.add_argument(
        "--insecure",
        action="store_true",
        default=env("RUNWICK_INSECURE", "") not in ("", "0", "false"),
        help="turn authentication off (refused unless --host is a loopback address) [RUNWICK_INSECURE=1]",
    )
    serve.add_argument(
        "--admin-token-file",
        default=env("RUNWICK_ADMIN_TOKEN_FILE"),
        help="also write the bootstrap admin token here (mode 0600) [RUNWICK_ADMIN_TOKEN_FILE]",
    )
    serve.add_argument(
        "--tls-cert", default=env("RUNWICK_TLS_CERT"), help="PEM server certificate [RUNWICK_TLS_CERT]"
    )
    serve.add_argument("--tls-key", default=env("RUNWICK_TLS_KEY"), help="PEM server key [RUNWICK_TLS_KEY]")
    serve.add_argument(
        "--tls-client-ca",
        default=env("RUNWICK_TLS_CLIENT_CA"),
        help="PEM CA: require client certificates it signed (mutual TLS) [RUNWICK_TLS_CLIENT_CA]",
    )


def serve_security_config(options: argparse.Namespace) -> dict[str, Any]:
    """The CoordinatorConfig fields the security flags set: auth is on by default."""
    return {
        "auth_enabled": not options.insecure,
        "admin_token_file": options.admin_token_file,
        "tls_cert_file": options.tls_cert,
        "tls_key_file": options.tls_key,
        "tls_client_ca_file": options.tls_client_ca,
    }


def announce_bootstrap_token(token: str | None, token_file: str | None) -> None:
    """Prints a just-created bootstrap admin token once, clearly labelled, on stdout."""
    if token is None:
        return
    lines = [BOOTSTRAP_BANNER, f"    {token}"]
    if token_file:
        lines.append(f"(also written to {token_file})")
    lines.append("create narrower tokens with: runwick tokens create --name NAME --scope SCOPE --token ...")
    print("\n".join(lines), flush=True)


def _time(stamp: Timestamp) -> str:
    return stamp.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds")


def _table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
