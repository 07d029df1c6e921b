"""``runwick workers list``: the worker streams connected to the coordinator replica the
command reaches (``ListWorkers``, needs ``read``).

Each replica knows only its own streams (they live in its memory, not in the database),
so with several replicas behind one address this lists the one that answered, named in
the output; point ``--target`` at each replica's own address to see them all. In-flight
counts come from the database, so they are right whichever replica holds the stream.
"""

from __future__ import annotations

import argparse
import sys

from coordinator.cli.connect import add_connection_flags, run_client_command
from coordinator.cli.output import Column, emit, output_mode, show_age, show_time, table, to_json
from worker_sdk import Client


def add_workers_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    workers = commands.add_parser("workers", help="the workers connected to a coordinator replica")
    actions = workers.add_subparsers(dest="workers_command", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        help="connected workers of the replica reached: ID, host, SDK, queues, capacity, load, since (read)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    add_connection_flags(listing)


def run_workers_command(options: argparse.Namespace) -> int:
    return run_client_command(options, lambda client: _list(client, options))


def _list(client: Client, options: argparse.Namespace) -> int:
    listing = client.list_workers()
    mode = output_mode(options)
    if mode == "json":
        emit({"replica": listing.replica, "workers": [to_json(w) for w in listing.workers]})
        return 0
    wide = mode == "wide"
    print(f"replica {listing.replica}: {len(listing.workers)} worker stream(s)", file=sys.stderr)
    table(
        [
            Column("worker", keep=True),
            Column("host"),
            Column("sdk"),
            Column("queues"),
            Column("capacity"),
            Column("in flight"),
            Column("credit", wide_only=True),
            Column("wire names", wide_only=True),
            Column("token", wide_only=True),
            Column("since" if wide else "connected"),
        ],
        [
            [
                w.worker_id,
                w.host or "-",
                w.sdk or "-",
                ",".join(w.queues),
                str(w.capacity),
                str(w.in_flight),
                str(w.credit),
                ",".join(w.wire_names) or "-",
                w.token_id or "-",
                show_time(w.connected_at) if wide else show_age(w.connected_at) + " ago",
            ]
            for w in listing.workers
        ],
        wide=wide,
    )
    return 0
