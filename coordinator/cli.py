"""The ``runwick`` command: serve, migrate, jobs, worker.

Server pieces are imported only by the commands that need them, so ``runwick jobs`` and
``runwick worker`` work with the SDK-only install (``pip install runwick``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence

from worker_sdk import configure_logging

DEFAULT_TARGET = "127.0.0.1:7233"


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runwick", description="Runwick job coordinator and tools.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the coordinator")
    _database_flag(serve)
    serve.add_argument(
        "--host", default=_env("RUNWICK_HOST", "127.0.0.1"), help="listen address [RUNWICK_HOST]"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=int(_env("RUNWICK_PORT", "7233")),
        help="gRPC port, 0 = any [RUNWICK_PORT]",
    )
    serve.add_argument(
        "--maintenance-interval",
        type=float,
        default=float(_env("RUNWICK_MAINTENANCE_INTERVAL_S", "1.0")),
        help="seconds between lease-expiry passes [RUNWICK_MAINTENANCE_INTERVAL_S]",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=float(_env("RUNWICK_DRAIN_TIMEOUT_S", "30")),
        help="seconds workers get to finish on shutdown [RUNWICK_DRAIN_TIMEOUT_S]",
    )
    serve.add_argument(
        "--health-port",
        type=int,
        default=int(_env("RUNWICK_HEALTH_PORT", "7234")),
        help="plaintext gRPC health port for probes, 0 = any, -1 = none [RUNWICK_HEALTH_PORT]",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("RUNWICK_METRICS_PORT", "9233")),
        help="Prometheus /metrics HTTP port, 0 = any, -1 = none [RUNWICK_METRICS_PORT]",
    )
    serve.add_argument(
        "--max-connection-age",
        type=float,
        default=float(_env("RUNWICK_MAX_CONNECTION_AGE_S", "1800")),
        help="seconds before a connection is asked to go, so workers spread over replicas "
        "[RUNWICK_MAX_CONNECTION_AGE_S]",
    )
    serve.add_argument(
        "--max-connection-age-grace",
        type=float,
        default=float(_env("RUNWICK_MAX_CONNECTION_AGE_GRACE_S", "60")),
        help="seconds open streams get after that [RUNWICK_MAX_CONNECTION_AGE_GRACE_S]",
    )
    _logging_flags(serve)
    from coordinator.cli_admin import add_admin_commands, add_serve_security_flags

    add_serve_security_flags(serve)
    from coordinator.cli_bounds import add_bounds_flags

    add_bounds_flags(serve)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    _database_flag(migrate)

    worker = commands.add_parser(
        "worker", help="run a Worker defined in a module: runwick worker pkg.mod:worker"
    )
    worker.add_argument(
        "spec", help="module path and attribute of a worker_sdk.Worker, e.g. myapp.jobs:worker"
    )
    _logging_flags(worker)

    from coordinator.bench import add_bench_command
    from coordinator.cli_jobs import add_jobs_commands

    add_bench_command(commands)

    add_jobs_commands(commands, default_target=_env("RUNWICK_TARGET", DEFAULT_TARGET))
    add_admin_commands(commands, default_target=_env("RUNWICK_TARGET", DEFAULT_TARGET))
    return parser


def _logging_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default=_env("RUNWICK_LOG_LEVEL", "INFO"), help="[RUNWICK_LOG_LEVEL]")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=_env("RUNWICK_LOG_FORMAT", "text"),
        help="json: one object per line with job and attempt IDs [RUNWICK_LOG_FORMAT]",
    )


def _port_or_none(port: int) -> int | None:
    return None if port < 0 else port


def _database_flag(parser: argparse.ArgumentParser) -> None:
    from coordinator.config import DEFAULT_DATABASE_URL

    parser.add_argument(
        "--database-url",
        default=_env("RUNWICK_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="sqlite:///path or postgresql://user@host/db [RUNWICK_DATABASE_URL]",
    )


def main(argv: Sequence[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.command == "serve":
        return _serve(options)
    if options.command == "migrate":
        return _migrate(options)
    if options.command == "worker":
        return _worker(options)
    if options.command == "bench":
        from coordinator.bench import run_bench

        return run_bench(options)
    if options.command in ("tokens", "audit"):
        from coordinator.cli_admin import run_admin_command

        return run_admin_command(options)
    from coordinator.cli_jobs import run_jobs_command

    return run_jobs_command(options)


def _serve(options: argparse.Namespace) -> int:
    configure_logging(options.log_level, options.log_format)
    from coordinator.cli_admin import serve_security_config
    from coordinator.cli_bounds import bounds_from_options
    from coordinator.config import ConfigError, CoordinatorConfig
    from coordinator.store.migrate import SchemaNotCurrent

    try:
        bounds = bounds_from_options(options)
    except ConfigError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    config = CoordinatorConfig(
        bounds=bounds,
        **serve_security_config(options),
        database_url=options.database_url,
        host=options.host,
        port=options.port,
        maintenance_interval_s=options.maintenance_interval,
        drain_timeout_s=options.drain_timeout,
        health_port=_port_or_none(options.health_port),
        metrics_port=_port_or_none(options.metrics_port),
        max_connection_age_ms=int(options.max_connection_age * 1000),
        max_connection_age_grace_ms=int(options.max_connection_age_grace * 1000),
    )
    try:
        asyncio.run(_serve_until_signalled(config))
    except (SchemaNotCurrent, ConfigError) as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    return 0


async def _serve_until_signalled(config: object) -> None:
    from coordinator.api.server import start_coordinator
    from coordinator.config import CoordinatorConfig

    assert isinstance(config, CoordinatorConfig)
    running = await start_coordinator(config)
    from coordinator.cli_admin import announce_bootstrap_token

    announce_bootstrap_token(running.bootstrap_token, config.admin_token_file)
    print(f"runwick health port {running.health_port}, metrics port {running.metrics_port}", flush=True)
    # Tests and scripts read this line to learn the port (with --port 0).
    print(f"runwick coordinator listening on {running.target}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    logging.getLogger("runwick").info("shutting down: draining workers")
    await running.stop()


def _migrate(options: argparse.Namespace) -> int:
    from coordinator.store import Store

    store = Store(options.database_url)
    try:
        store.migrate()
    finally:
        store.close()
    print("database schema is up to date")
    return 0


def _worker(options: argparse.Namespace) -> int:
    configure_logging(options.log_level, options.log_format)
    module_name, _, attribute = options.spec.partition(":")
    if not module_name or not attribute:
        print("runwick: worker spec must look like package.module:attribute", file=sys.stderr)
        return 2
    sys.path.insert(0, os.getcwd())
    try:
        worker = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        print(f"runwick: cannot load {options.spec}: {exc}", file=sys.stderr)
        return 2
    worker.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
