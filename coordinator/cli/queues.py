"""``runwick queues list|get|pause|resume|limit|rate|delete`` (R-17, issue 41): the SDK
client's queue calls. Listing and getting need the ``read`` scope, changes ``manage``,
deleting ``admin``. A list prints one page (``--limit``) unless ``--all`` follows every
page; ``get`` prints one queue (``cli.queue_view``)."""

from __future__ import annotations

import argparse
import sys

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.jobs import MAX_LIMIT, add_paging_flags
from coordinator.cli.output import Column, emit, output_mode, table, to_json
from coordinator.cli.queue_view import rate_text, show_queue
from coordinator.domain.rates import parse_rate
from worker_sdk import Client, JobState, QueueInfo

_SHOWN_STATES = (
    JobState.SCHEDULED,
    JobState.WAITING,
    JobState.AVAILABLE,
    JobState.RESERVED,
    JobState.RUNNING,
)


def add_queue_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queues = commands.add_parser(
        "queues",
        help="list and show queues, pause and resume them, limit their concurrency, delete empty ones",
    )
    actions = queues.add_subparsers(dest="queues_command", required=True)
    listing = actions.add_parser(
        "list", help="queues (cq2 before cq10) with controls and job counts, a page at a time (needs read)"
    )
    add_paging_flags(listing, "queues")
    add_connection_flags(listing)
    get = actions.add_parser(
        "get",
        help="one queue: its limits and rate, keys active, at their limit or rate, what each "
        "control holds back, jobs per state (needs read)",
    )
    get.add_argument("queue", help="the queue's name")
    add_connection_flags(get)
    for name, text in (
        ("pause", "stop new claims of the queue's jobs; running ones finish (needs manage; audited)"),
        ("resume", "let workers claim the queue's jobs again (needs manage; audited)"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("queue", help="the queue's name")
        add_connection_flags(action)
    limit = actions.add_parser(
        "limit", help="at most N of the queue's jobs running at once, on every worker (needs manage; audited)"
    )
    limit.add_argument("queue", help="the queue's name")
    limit.add_argument("limit", help="1 or more, or 'none' to remove the limit")
    limit.add_argument(
        "--per-key",
        action="store_true",
        help="limit each concurrency key of the queue to N reserved or running jobs instead "
        "(docs/flow-control.md); both limits hold together",
    )
    add_connection_flags(limit)
    rate = actions.add_parser(
        "rate",
        help="at most COUNT starts of the queue's jobs in any PERIOD, on every worker "
        "(needs manage; audited)",
    )
    rate.add_argument("queue", help="the queue's name")
    rate.add_argument(
        "rate", help="COUNT/PERIOD, like 100/1m, 10/1s or 5/500ms (units ms, s, m, h, d); 'off' removes it"
    )
    rate.add_argument("--per-key", action="store_true", help="the rate holds for each concurrency key")
    add_connection_flags(rate)
    delete = actions.add_parser(
        "delete",
        help="delete a queue that holds no jobs, with its controls; refused while it holds any "
        "(needs admin; audited)",
    )
    delete.add_argument("queue", help="the queue's name")
    add_connection_flags(delete)


def run_queue_command(options: argparse.Namespace) -> int:
    def command(client: Client) -> int:
        if options.queues_command == "list":
            return _list(client, options)
        if options.queues_command == "get":
            return show_queue(client.get_queue(options.queue), options)
        if options.queues_command == "pause":
            return _show(client.pause_queue(options.queue), options)
        if options.queues_command == "resume":
            return _show(client.resume_queue(options.queue), options)
        if options.queues_command == "delete":
            return _deleted(client.delete_queue(options.queue), options)
        if options.queues_command == "rate":
            return _show(_set_rate(client, options), options)
        if options.per_key:
            return _show(client.set_queue_key_limit(options.queue, _limit(options.limit)), options)
        return _show(client.set_queue_limit(options.queue, _limit(options.limit)), options)

    return run_client_command(options, command)


def _limit(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"limit must be a whole number of 1 or more, or none; got {text!r}") from None


def _set_rate(client: Client, options: argparse.Namespace) -> QueueInfo:
    """Bad text is refused here, before any call: nothing is sent, nothing changes."""
    if options.rate.strip().lower() in ("off", "none"):
        return client.set_queue_rate(options.queue, None)
    count, period_ms = parse_rate(options.rate)
    return client.set_queue_rate(options.queue, count, period_ms / 1000, per_key=options.per_key)


def _list(client: Client, options: argparse.Namespace) -> int:
    if options.all:
        queues, token = client.list_queues(page_size=MAX_LIMIT), ""
    else:
        queues, token = client.list_queues_page(page_size=options.limit, page_token=options.page_token)
    mode = output_mode(options)
    if mode == "json":
        emit({"queues": [to_json(q) for q in queues], "next_page_token": token})
        return 0
    rows = []
    for queue in queues:
        counts = [str(queue.counts.get(state, 0)) for state in _SHOWN_STATES]
        age = queue.oldest_available_age
        rows.append(
            [
                queue.name,
                "paused" if queue.paused else "-",
                str(queue.concurrency_limit) if queue.concurrency_limit is not None else "-",
                str(queue.key_limit) if queue.key_limit is not None else "-",
                _keys_text(queue),
                _held_keys_text(queue),
                rate_text(queue),
                *counts,
                f"{age.total_seconds():.1f}s" if age is not None else "-",
            ]
        )
    columns = [
        Column("queue", keep=True),
        Column("paused"),
        Column("limit"),
        Column("key limit"),
        Column("keys active/full", wide_only=True),
        Column("keys held", wide_only=True),
        Column("rate"),
    ]
    columns += [Column(s.value) for s in _SHOWN_STATES]
    table([*columns, Column("oldest")], rows, wide=mode == "wide")
    if token:
        print(f"more queues: add --page-token {token} for the next page, or --all", file=sys.stderr)
    return 0


def _keys_text(queue: QueueInfo) -> str:
    """``active/full`` for a queue with a per-key control (``-`` for a count it lacks)."""
    if queue.active_keys is None:
        return "-"
    full = queue.keys_at_limit if queue.keys_at_limit is not None else "-"
    return f"{queue.active_keys}/{full}"


def _held_keys_text(queue: QueueInfo) -> str:
    """The keys that hold their jobs back, the first few named: ``full a,b +3; at rate c``."""
    parts = []
    for what, first, count in (
        ("full", queue.first_keys_at_limit, queue.keys_at_limit),
        ("at rate", queue.first_keys_at_rate, queue.keys_at_rate),
    ):
        if count:
            more = f" +{count - len(first)}" if count > len(first) else ""
            names = ",".join(key or "''" for key in first)  # '' is the implicit key
            parts.append(f"{what} {names}{more}")
    return "; ".join(parts) or "-"


def _deleted(queue: QueueInfo, options: argparse.Namespace) -> int:
    if output_mode(options) == "json":
        emit({"deleted": to_json(queue)})
    else:
        print(f"{queue.name}  deleted (an enqueue to it makes it again)")
    return 0


def _show(queue: QueueInfo, options: argparse.Namespace) -> int:
    if output_mode(options) == "json":
        emit({"queue": to_json(queue)})
    else:
        limit = queue.concurrency_limit if queue.concurrency_limit is not None else "none"
        key_limit = queue.key_limit if queue.key_limit is not None else "none"
        state = "paused" if queue.paused else "running"
        rate = f", rate {rate_text(queue)}" if queue.rate is not None else ""
        print(f"{queue.name}  {state}, limit {limit}, per-key limit {key_limit}{rate}")
    return 0
