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
import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY

from coordinator.cli.connect import add_connection_flags, connection_options
from coordinator.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED
from coordinator.cli.logs import add_logging_flags
from worker_sdk import configure_logging
from worker_sdk._metrics_http import MetricsHttpServer

if TYPE_CHECKING:
    from worker_sdk.outbox import OutboxRelay

STOP_TIMEOUT_S = 30.0
"""How long a stop waits for the batch in hand (its call has its own deadline)."""
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
    relay.add_argument(
        "--metrics-port",
        type=int,
        default=env("RUNWICK_OUTBOX_METRICS_PORT", "-1"),  # converted by type= on use only
        help="serve the relay's Prometheus /metrics on this port (0 = any free port, -1 = none, "
        "the default) [RUNWICK_OUTBOX_METRICS_PORT]",
    )
    relay.add_argument(
        "--metrics-host",
        default=env("RUNWICK_OUTBOX_METRICS_HOST", "127.0.0.1"),
        help="the address --metrics-port listens on (default loopback) [RUNWICK_OUTBOX_METRICS_HOST]",
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

    if not -1 <= options.metrics_port <= 65_535:
        print(f"runwick: --metrics-port must be -1 to 65535, got {options.metrics_port}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging.getLogger(__name__).info(
        "runwick outbox relay: relaying table %s to %s", options.table, options.target
    )
    try:
        asyncio.run(_serve(relay, options.metrics_host, options.metrics_port))
    except OSError as exc:  # the metrics port could not be bound
        where = f"{options.metrics_host}:{options.metrics_port}"
        print(f"runwick: cannot serve metrics on {where}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(
        f"runwick outbox relay: stopped; relayed {relay.relayed} row(s), moved aside {relay.failed}",
        file=sys.stderr,
    )
    return EXIT_OK


async def _serve(relay: OutboxRelay, metrics_host: str, metrics_port: int) -> None:
    """Runs the relay on its thread (and ``/metrics`` on this loop) until SIGTERM or SIGINT;
    the relay then finishes the batch in hand."""
    metrics = None
    if metrics_port >= 0:
        metrics = MetricsHttpServer(REGISTRY)
        port = await metrics.start(metrics_host, metrics_port)
        print(f"runwick outbox relay: metrics on {metrics_host}:{port}/metrics", file=sys.stderr, flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    relay.start()
    try:
        await stopping.wait()
    finally:
        await asyncio.to_thread(relay.stop, STOP_TIMEOUT_S)
        if metrics is not None:
            await metrics.close()
