"""``runwick outbox relay``: forwards an application's committed outbox rows to the
coordinator (``worker_sdk.outbox.OutboxRelay``) until SIGTERM or Ctrl-C.

The application's database is ``--database-url`` (a SQLAlchemy URL, e.g.
``postgresql+psycopg://app@db/app`` or ``sqlite:///app.db``); the coordinator and its
token (``enqueue`` scope) come from the same flags as every client command. On
PostgreSQL it wakes on LISTEN/NOTIFY and several relays share the rows; elsewhere it
polls. Needs SQLAlchemy and the database's driver (``pip install "runwick[outbox]"``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from types import FrameType

from coordinator.cli.connect import add_connection_flags, connection_options
from coordinator.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED
from coordinator.cli.logs import add_logging_flags
from worker_sdk import configure_logging

OUTBOX_EXTRA_HINT = 'the outbox relay needs SQLAlchemy: pip install "runwick[outbox]"'


def add_outbox_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    outbox = commands.add_parser("outbox", help="transactional enqueue: relay an application's outbox table")
    actions = outbox.add_subparsers(dest="outbox_command", required=True, metavar="ACTION")
    relay = actions.add_parser(
        "relay",
        help="forward committed outbox rows to the coordinator until stopped (enqueue)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    env = os.environ.get
    relay.add_argument(
        "--database-url",
        default=env("RUNWICK_OUTBOX_DATABASE_URL"),
        help="the application's database, a SQLAlchemy URL (required) [RUNWICK_OUTBOX_DATABASE_URL]",
    )
    relay.add_argument(
        "--table",
        default=env("RUNWICK_OUTBOX_TABLE", "runwick_outbox"),
        help="the outbox table [RUNWICK_OUTBOX_TABLE]",
    )
    relay.add_argument(
        "--batch-size", type=int, default=100, help="rows per Enqueue call, 1-500 (default 100)"
    )
    relay.add_argument(
        "--poll-interval",
        type=float,
        default=0.5,
        help="s between looks for rows without a notification (default 0.5)",
    )
    relay.add_argument(
        "--notify-channel",
        default="runwick_outbox",
        help="PostgreSQL channel the writers notify (default runwick_outbox)",
    )
    add_connection_flags(relay)
    add_logging_flags(relay)


def run_outbox_command(options: argparse.Namespace) -> int:
    configure_logging(options.log_level, options.log_format)
    try:
        from worker_sdk.outbox import OutboxDatabaseError, OutboxRelay, RelayConfig, outbox_table
    except ModuleNotFoundError as exc:
        print(f"runwick: {OUTBOX_EXTRA_HINT} (missing module {exc.name})", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not options.database_url:
        print("runwick: give the application's database with --database-url", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        config = RelayConfig(
            batch_size=options.batch_size,
            poll_interval_s=options.poll_interval,
            notify_channel=options.notify_channel,
        )
        relay = OutboxRelay(
            options.database_url,
            connection_options(options),
            table=outbox_table(name=options.table),
            config=config,
        )
    except ValueError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        relay.check()
    except OutboxDatabaseError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return EXIT_REFUSED

    def stop(signum: int, frame: FrameType | None) -> None:
        relay.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logging.getLogger(__name__).info(
        "runwick outbox relay: relaying table %s to %s", options.table, options.target
    )
    try:
        relay.run()
    finally:
        relay.close()
    print(
        f"runwick outbox relay: stopped; relayed {relay.relayed} row(s), moved aside {relay.failed}",
        file=sys.stderr,
    )
    return EXIT_OK
