"""``runwick serve`` and ``runwick migrate``: the coordinator in this process.

The only module of the CLI that starts the coordinator or touches its schema. Its server
imports (``coordinator.process``, ``coordinator.app``) sit inside ``run_serve``,
``_serve_until_signalled`` and ``migrate_schema``, so building the parser loads none of
the server's dependencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
from typing import TYPE_CHECKING

from coordinator.cli.bounds import add_bounds_flags, bounds_from_options
from coordinator.cli.database_flags import (
    database_flag,
    database_timeout_flags,
    database_timeouts_config,
    database_url,
    redacted_url,
    seconds,
)
from coordinator.cli.ingress import add_ingress_flags, ingress_config
from coordinator.cli.logs import add_logging_flags, quiet_libraries
from coordinator.cli.metrics_flags import add_metrics_flags, metrics_config
from coordinator.cli.ports import busy_port
from coordinator.cli.retention import add_retention_flags, retention_from_options
from coordinator.cli.security_flags import security_config, security_flags
from worker_sdk import configure_logging
from worker_sdk._logging import JsonFormatter

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig

BOOTSTRAP_BANNER = "runwick bootstrap admin token (shown once; store it now):"
READY_LINE = "runwick coordinator listening on "
"""Tests and scripts read the line starting so to learn the port (with ``--port 0``);
with ``--log-format json`` it is the ``message`` of a JSON line that also has ``target``."""


_HOST_NAME = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)$")


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def add_serve_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``serve`` (with its security, logging and bounds flags) and ``migrate``."""
    serve = commands.add_parser("serve", help="run the coordinator")
    database_flag(serve)
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
        "--schedule-interval",
        type=float,
        default=float(_env("RUNWICK_SCHEDULE_INTERVAL_S", "1.0")),
        help="seconds between passes that enqueue schedules' ticks [RUNWICK_SCHEDULE_INTERVAL_S]",
    )
    serve.add_argument(
        "--schedule-grace",
        type=float,
        default=float(_env("RUNWICK_SCHEDULE_GRACE_S", "60")),
        help="seconds a schedule's tick may be late and still run; older ones were missed "
        "[RUNWICK_SCHEDULE_GRACE_S]",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=float(_env("RUNWICK_DRAIN_TIMEOUT_S", "30")),
        help="seconds workers get to finish on shutdown [RUNWICK_DRAIN_TIMEOUT_S]",
    )
    serve.add_argument(
        "--startup-database-wait",
        type=float,
        default=float(_env("RUNWICK_STARTUP_DATABASE_WAIT", "30")),
        help="seconds a start-up tries again while its database connection is lost (a "
        "terminated backend, a server starting or recovering), 0 = once "
        "[RUNWICK_STARTUP_DATABASE_WAIT]",
    )
    serve.add_argument(
        "--health-port",
        type=int,
        default=int(_env("RUNWICK_HEALTH_PORT", "7234")),
        help="plaintext gRPC health port for probes, 0 = any, -1 = none [RUNWICK_HEALTH_PORT]",
    )
    serve.add_argument(
        "--scaler-port",
        type=int,
        default=int(_env("RUNWICK_SCALER_PORT", "-1")),
        help="gRPC port serving only KEDA's external scaler (no token; the API port's TLS), "
        "0 = any, -1 = none [RUNWICK_SCALER_PORT]",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("RUNWICK_METRICS_PORT", "9233")),
        help="Prometheus /metrics HTTP port, 0 = any, -1 = none [RUNWICK_METRICS_PORT]",
    )
    serve.add_argument(
        "--dashboard-port",
        type=int,
        default=int(_env("RUNWICK_DASHBOARD_PORT", "7235")),
        help="web dashboard HTTP port (HTTPS with --tls-cert), 0 = any, -1 = none [RUNWICK_DASHBOARD_PORT]",
    )
    serve.add_argument(
        "--dashboard-allowed-host",
        action="append",
        metavar="NAME",
        default=[name for name in _env("RUNWICK_DASHBOARD_ALLOWED_HOSTS", "").split(",") if name.strip()],
        help="a host name the dashboard answers besides --host (repeatable; others get 421) "
        "[RUNWICK_DASHBOARD_ALLOWED_HOSTS, comma-separated]",
    )
    serve.add_argument(
        "--metrics-max-label-values",
        type=int,
        default=int(_env("RUNWICK_METRICS_MAX_LABEL_VALUES", "100")),
        help="distinct queues and wire names each with series of their own; the rest count as "
        "(other) [RUNWICK_METRICS_MAX_LABEL_VALUES]",
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
    add_ingress_flags(serve)
    serve.add_argument(
        "--processes",
        type=_processes,
        default=_env("RUNWICK_PROCESSES", "1"),
        metavar="N|auto",
        help="PostgreSQL: coordinator processes on this host, sharing the gRPC port, so the "
        "coordinator uses N cores; auto: one per usable core (1 on SQLite) [RUNWICK_PROCESSES]",
    )
    add_metrics_flags(serve)
    database_timeout_flags(serve)
    add_logging_flags(serve)
    security_flags(serve)
    add_bounds_flags(serve)
    add_retention_flags(serve)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    database_flag(migrate)
    migrate.add_argument(
        "--lock-timeout",
        type=seconds,
        default=_env("RUNWICK_MIGRATE_LOCK_TIMEOUT_S", "600"),
        metavar="S",
        help="PostgreSQL: seconds to wait while another migration runs, 0 = forever "
        "[RUNWICK_MIGRATE_LOCK_TIMEOUT_S]",
    )
    add_logging_flags(migrate)


def _processes(text: str) -> int | None:
    from coordinator.cli.replicas import parse_processes

    try:
        return parse_processes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _host_names(names: list[str]) -> tuple[str, ...]:
    """``--dashboard-allowed-host`` values, checked: a name or address, no port."""
    from coordinator.config import ConfigError

    checked = []
    for name in (name.strip() for name in names):
        if not name or not _HOST_NAME.match(name):
            raise ConfigError(
                f"--dashboard-allowed-host {name[:100]!r} is not a host name or address "
                "(letters, digits, dots and dashes, or an IPv6 address in brackets; no port)"
            )
        checked.append(name.lower())
    return tuple(checked)


def _port_or_none(port: int) -> int | None:
    return None if port < 0 else port


def run_serve(options: argparse.Namespace) -> int:
    """``runwick serve``: runs the coordinator until SIGTERM or SIGINT."""
    configure_logging(options.log_level, options.log_format)
    quiet_libraries()
    from coordinator.app import SchemaNotCurrent
    from coordinator.cli.replicas import process_count, usable_cores
    from coordinator.config import ConfigError, CoordinatorConfig, check_security

    terminal = sys.stdout.isatty()
    try:
        url = database_url(options)
        processes = process_count(options.processes, url, usable_cores())
        bounds = bounds_from_options(options)
        retention = retention_from_options(options)
        config = CoordinatorConfig(
            bounds=bounds,
            **retention,
            **security_config(options, terminal=terminal),
            **database_timeouts_config(options),
            **ingress_config(options),
            **metrics_config(options),
            database_url=url,
            host=options.host,
            port=options.port,
            share_port=processes > 1,
            maintenance_interval_s=options.maintenance_interval,
            schedule_interval_s=options.schedule_interval,
            schedule_grace_s=options.schedule_grace,
            drain_timeout_s=options.drain_timeout,
            startup_database_wait_s=options.startup_database_wait,
            health_port=_port_or_none(options.health_port),
            scaler_port=_port_or_none(options.scaler_port),
            metrics_port=_port_or_none(options.metrics_port),
            dashboard_port=_port_or_none(options.dashboard_port),
            dashboard_allowed_hosts=_host_names(options.dashboard_allowed_host),
            metrics_max_label_values=options.metrics_max_label_values,
            max_connection_age_ms=int(options.max_connection_age * 1000),
            max_connection_age_grace_ms=int(options.max_connection_age_grace * 1000),
        )
    except ConfigError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    try:
        check_security(config)  # a refused setting says so before a port is looked at
    except ConfigError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    busy = busy_port(config)
    if busy is not None:
        print(f"runwick: {busy}", file=sys.stderr)
        return 2
    warning = plaintext_warning(config)
    if warning is not None:
        logging.getLogger("runwick").warning(warning)
    if not config.auth_enabled:
        logging.getLogger("runwick").warning(
            "authentication is OFF (--insecure): whoever reaches %s may enqueue, cancel, purge "
            "and make tokens; use it for a local try only",
            config.host,
        )
    try:
        asyncio.run(
            _serve_until_signalled(
                config,
                processes,
                log_settings=(options.log_level, options.log_format),
                terminal=terminal,
            )
        )
    except (SchemaNotCurrent, ConfigError) as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    return 0


async def _serve_until_signalled(
    config: CoordinatorConfig, processes: int, *, log_settings: tuple[str, str], terminal: bool
) -> None:
    """Runs the coordinator, and with ``processes`` over 1 its replicas on the same port
    (``cli.replicas``), until SIGTERM or SIGINT; the ready line comes once all listen."""
    from coordinator.cli.heap import freeze_start_up_heap
    from coordinator.cli.replicas import ReplicaSet
    from coordinator.process import start_coordinator

    json_lines = log_settings[1] == "json"
    running = await start_coordinator(config)
    # Before the ready line: a SIGTERM that comes as soon as it is out must drain and
    # exit 0, not end the process by the default action. (While starting, the default
    # action stays: a start stuck on its database ends at once.)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    replicas = None
    if processes > 1:
        replicas = ReplicaSet(config, running.port, processes - 1, *log_settings)
        try:
            await replicas.start()
        except BaseException:
            await running.stop(grace_s=0)
            raise
    if terminal:
        announce_bootstrap_token(running.bootstrap_token, config.admin_token_file)
    metrics_ports = [running.metrics_port, *(replicas.metrics_ports if replicas else [])]
    metrics_text = ", ".join(_port_text(port) for port in metrics_ports)
    # The scaler port is named only when served: it is off unless asked for.
    scaler_text = f", scaler port {running.scaler_port}" if running.scaler_port is not None else ""
    _say(
        f"runwick health port {_port_text(running.health_port)}, "
        f"metrics port{'s' if len(metrics_ports) > 1 else ''} {metrics_text}, "
        f"dashboard {_dashboard_text(config, running.dashboard_port)}{scaler_text}",
        json_lines,
        health_port=running.health_port,
        metrics_port=running.metrics_port,
        dashboard_port=running.dashboard_port,
        **({"scaler_port": running.scaler_port} if running.scaler_port is not None else {}),
        **({"replica_metrics_ports": metrics_ports[1:]} if replicas else {}),
    )
    if replicas:
        _say(f"runwick coordinator processes: {processes}", json_lines, processes=processes)
    freeze_start_up_heap()
    _say(f"{READY_LINE}{running.target}", json_lines, target=running.target)
    await stop.wait()
    logging.getLogger("runwick").info("shutting down: draining workers")
    await asyncio.gather(running.stop(), *([replicas.stop()] if replicas else []))


def plaintext_warning(config: CoordinatorConfig) -> str | None:
    """What to warn of when the coordinator listens beyond this host without TLS: every
    call's bearer token and every payload crosses the network in clear. None otherwise."""
    from coordinator.config import is_loopback

    if config.tls_cert_file or is_loopback(config.host):
        return None
    return (
        f"PLAINTEXT on {config.host}: without TLS, bearer tokens, payloads and dashboard logins "
        "cross the network readable (and replayable) by anyone on the path; serve with "
        "--tls-cert and --tls-key, or listen on 127.0.0.1 only"
    )


def _dashboard_text(config: CoordinatorConfig, port: int | None) -> str:
    """``port off``, or the port and the address to open in a browser."""
    if port is None:
        return "port off"
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::", "") else config.host
    host = f"[{host}]" if ":" in host else host
    return f"port {port} ({'https' if config.tls_cert_file else 'http'}://{host}:{port}/)"


def _port_text(port: int | None) -> str:
    return "off" if port is None else str(port)


def _say(text: str, json_lines: bool, **fields: object) -> None:
    """A start-up line on stdout for people and scripts: plain, or with ``--log-format
    json`` a JSON object like the log's with ``fields`` added."""
    if json_lines:
        record = logging.LogRecord("runwick", logging.INFO, __file__, 0, text, (), None)
        text = json.dumps({**json.loads(JsonFormatter().format(record)), **fields})
    print(text, flush=True)


def announce_bootstrap_token(token: str | None, token_file: str | None) -> None:
    """Prints a just-created bootstrap admin token once, clearly labelled, on stdout: only
    call it when stdout is a terminal (a person reads it; no log collector does)."""
    if token is None:
        return
    lines = [BOOTSTRAP_BANNER, f"    {token}"]
    if token_file:
        lines.append(f"(also written to {token_file})")
    lines.append("create narrower tokens with: runwick tokens create --name NAME --scope SCOPE --token ...")
    print("\n".join(lines), flush=True)


def run_migrate(options: argparse.Namespace) -> int:
    """``runwick migrate``: creates or upgrades the schema and says which it did."""
    configure_logging(options.log_level, options.log_format)
    quiet_libraries()
    from coordinator.app import MigrationLocked
    from coordinator.config import ConfigError

    try:
        url = database_url(options)
        before, after = migrate_schema(url, lock_timeout_s=options.lock_timeout)
    except (ConfigError, MigrationLocked) as exc:
        print(f"runwick: {exc}", file=sys.stderr)
        return 2
    where = redacted_url(url)
    if before is None:
        said = f"created the database schema (revision {after}) in {where}"
    elif before != after:
        said = f"upgraded the database schema from revision {before} to {after} in {where}"
    else:
        said = f"the database schema is already up to date (revision {after}) in {where}; nothing changed"
    _say(said, options.log_format == "json", revision_before=before, revision=after)
    return 0


def migrate_schema(
    database_url: str, *, lock_timeout_s: float | None = None
) -> tuple[str | None, str | None]:
    """Creates or upgrades the coordinator's schema in ``database_url`` (also used by
    ``runwick bench`` for its scratch database) and returns the revisions before and
    after. On PostgreSQL one migration runs at a time (an advisory lock); waiting longer
    than ``lock_timeout_s`` for it raises MigrationLocked."""
    from coordinator.app import migrate_database

    return migrate_database(database_url, lock_timeout_s=lock_timeout_s)
