"""``runwick tokens create|list|revoke`` and ``runwick audit``: the SDK client's admin
calls, with a token that has the ``admin`` scope."""

from __future__ import annotations

import argparse
import json
import sys
from itertools import islice

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.output import audit_json, show_time, table, token_json
from worker_sdk import Client

SCOPES = ("enqueue", "read", "manage", "reveal", "work", "admin")
_MAX_PAGE = 500


def add_admin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    add_connection_flags(create)
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    add_connection_flags(listing)
    revoke = actions.add_parser("revoke", help="revoke a token by its ID")
    revoke.add_argument("token_id")
    add_connection_flags(revoke)

    audit = commands.add_parser("audit", help="list audit events, newest first (needs admin)")
    audit.add_argument("--action", help="only this action, e.g. attempt.reveal_error")
    audit.add_argument("--about", help="only events about this job, attempt or token ID")
    audit.add_argument("--limit", type=int, default=50)
    add_connection_flags(audit)


def run_admin_command(options: argparse.Namespace) -> int:
    def command(client: Client) -> int:
        if options.command == "audit":
            return _audit(client, options)
        if options.tokens_command == "create":
            return _create(client, options)
        if options.tokens_command == "list":
            return _list(client, options)
        return _revoke(client, options)

    return run_client_command(options, command)


def _split(values: list[str]) -> list[str]:
    """Repeated and comma-separated flag values, blanks dropped."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _create(client: Client, options: argparse.Namespace) -> int:
    created = client.create_token(options.name, _split(options.scopes), queues=_split(options.queues))
    if options.json:
        print(json.dumps({"token": token_json(created.token), "secret": created.secret}))
        return 0
    token = created.token
    print(f"created token {token.id} ({token.name}): scopes {','.join(token.scopes)}", file=sys.stderr)
    print("the secret below is shown only now:", file=sys.stderr)
    print(created.secret)
    return 0


def _list(client: Client, options: argparse.Namespace) -> int:
    tokens = client.list_tokens(include_revoked=options.all)
    if options.json:
        print(json.dumps([token_json(t) for t in tokens]))
        return 0
    table(
        ["id", "name", "scopes", "queues", "created", "revoked"],
        [
            [
                t.id,
                t.name,
                ",".join(t.scopes),
                ",".join(t.queues) or "-",
                show_time(t.created_at, "seconds"),
                show_time(t.revoked_at, "seconds") if t.revoked_at else "-",
            ]
            for t in tokens
        ],
    )
    return 0


def _revoke(client: Client, options: argparse.Namespace) -> int:
    token = client.revoke_token(options.token_id)
    if options.json:
        print(json.dumps(token_json(token)))
    else:
        print(f"revoked token {token.id} ({token.name})")
    return 0


def _audit(client: Client, options: argparse.Namespace) -> int:
    limit = max(options.limit, 1)
    found = client.list_audit_events(
        action=options.action or None, target=options.about or None, page_size=min(limit, _MAX_PAGE)
    )
    events = list(islice(found, limit))
    if options.json:
        print(json.dumps([audit_json(e) for e in events]))
        return 0
    table(
        ["time", "actor", "action", "target", "peer", "detail"],
        [
            [
                show_time(e.at, "seconds"),
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
