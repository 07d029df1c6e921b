"""``runwick tokens create|list|revoke`` and ``runwick audit``: the SDK client's admin
calls, with a token that has the ``admin`` scope."""

from __future__ import annotations

import argparse
import sys

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.jobs import MAX_LIMIT, add_paging_flags
from coordinator.cli.output import Column, emit, output_mode, show_time, table, to_json
from worker_sdk import Client

SCOPES = ("enqueue", "read", "manage", "reveal", "work", "admin")


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
        help="work and enqueue tokens: a queue it may take jobs from, enqueue into and name parents in "
        "(repeatable; default any)",
    )
    add_connection_flags(create)
    listing = actions.add_parser("list", help="list tokens (never their secrets)")
    listing.add_argument("--all", action="store_true", help="include revoked tokens")
    add_connection_flags(listing)
    revoke = actions.add_parser("revoke", help="revoke a token by its ID")
    revoke.add_argument("token_id", help="the token's ID (from `tokens list`)")
    add_connection_flags(revoke)

    audit = commands.add_parser("audit", help="list audit events, newest first (needs admin)")
    audit.add_argument("--action", help="only this action, e.g. attempt.reveal_error")
    audit.add_argument("--about", help="only events about this job, attempt or token ID")
    add_paging_flags(audit, "events")
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
    if output_mode(options) == "json":
        emit({"token": to_json(created.token), "secret": created.secret})
        return 0
    token = created.token
    print(f"created token {token.id} ({token.name}): scopes {','.join(token.scopes)}", file=sys.stderr)
    print("the secret below is shown only now:", file=sys.stderr)
    print(created.secret)
    return 0


def _list(client: Client, options: argparse.Namespace) -> int:
    tokens = client.list_tokens(include_revoked=options.all)
    mode = output_mode(options)
    if mode == "json":
        emit({"tokens": [to_json(t) for t in tokens]})
        return 0
    wide = mode == "wide"
    table(
        [
            Column("id", keep=True),
            Column("name"),
            Column("scopes", max_width=24),
            Column("queues", max_width=16),
            Column("created", wide_only=True),
            Column("created by", wide_only=True),
            Column("revoked"),
        ],
        [
            [
                t.id,
                t.name,
                ",".join(t.scopes),
                ",".join(t.queues) or "-",
                show_time(t.created_at, wide=wide),
                t.created_by or "-",
                show_time(t.revoked_at, wide=wide),
            ]
            for t in tokens
        ],
        wide=wide,
    )
    return 0


def _revoke(client: Client, options: argparse.Namespace) -> int:
    token = client.revoke_token(options.token_id)
    if output_mode(options) == "json":
        emit({"token": to_json(token)})
    else:
        print(f"revoked token {token.id} ({token.name})")
    return 0


def _audit(client: Client, options: argparse.Namespace) -> int:
    filters = {"action": options.action or None, "target": options.about or None}
    if options.all:
        events = list(client.list_audit_events(**filters, page_size=MAX_LIMIT))
        token = ""
    else:
        events, token = client.list_audit_events_page(
            **filters, page_size=options.limit, page_token=options.page_token
        )
    mode = output_mode(options)
    if mode == "json":
        emit({"events": [to_json(e) for e in events], "next_page_token": token})
        return 0
    wide = mode == "wide"
    table(
        [
            Column("time"),
            Column("actor"),
            Column("action"),
            Column("target", keep=True),
            Column("peer", wide_only=True),
            Column("detail"),
        ],
        [
            [
                show_time(e.at, wide=wide),
                f"{e.actor_name} ({e.actor_token_id})" if wide and e.actor_token_id else e.actor_name,
                e.action,
                e.target,
                e.peer,
                e.detail or "-",
            ]
            for e in events
        ],
        wide=wide,
    )
    if token:
        print(f"more events: add --page-token {token} for the next page, or --all", file=sys.stderr)
    return 0
