"""The processes and database a local ``runwick bench`` run starts, and how it stops them.

- ``ScratchDatabase``: a fresh SQLite file in the run's folder, or a fresh PostgreSQL
  database on the server of ``--database-url`` (created, migrated with ``runwick
  migrate``'s own function, dropped afterwards).
- ``start_coordinator``: ``runwick serve`` on a free loopback port, no tokens
  (``--insecure``, allowed on loopback only), no health or metrics port.
- ``start_workers``: ``coordinator.cli.bench.worker`` processes; the connection (target,
  token, TLS) goes to them in ``RUNWICK_*`` variables, never on their command line.

SQLAlchemy and psycopg are used only to create and drop the scratch PostgreSQL database
and to find its server processes; the bench never reads the coordinator's tables.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from coordinator.cli.bench import procfs
from coordinator.cli.serve import READY_LINE, migrate_schema

DEFAULT_PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
COORDINATOR_START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_LOOPBACK = {"127.0.0.1", "::1", "localhost", ""}


class BenchSetupError(Exception):
    """The bench could not start what it measures (the message says what to do)."""


def _pg_url(url: str) -> Any:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise BenchSetupError(f"--database-url must be a postgresql:// URL for --engine postgres, got {url}")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


@dataclass
class ScratchDatabase:
    """A database made for one run and thrown away after it."""

    engine: str
    """``sqlite`` or ``postgres``."""
    url: str
    """What the coordinator is given."""
    _server_url: Any = None
    _name: str | None = None

    @classmethod
    def create(cls, engine: str, server_url: str | None, folder: Path) -> ScratchDatabase:
        if engine == "sqlite":
            path = folder / "bench.db"
            for stale in (path, path.with_name("bench.db-wal"), path.with_name("bench.db-shm")):
                stale.unlink(missing_ok=True)  # an earlier run's, kept in --work-dir
            url = f"sqlite:///{path}"
            migrate_schema(url)
            return cls("sqlite", url)
        server = _pg_url(server_url or DEFAULT_PG_SERVER)
        name = f"runwick_bench_{secrets.token_hex(6)}"
        try:
            _admin_execute(server, f'CREATE DATABASE "{name}"')
        except Exception as exc:
            raise BenchSetupError(f"cannot create a scratch database on {_safe(server)}: {exc}") from exc
        database = cls(
            "postgres", server.set(database=name).render_as_string(hide_password=False), server, name
        )
        try:
            migrate_schema(database.url)
        except BaseException:
            database.drop()
            raise
        return database

    @property
    def name(self) -> str:
        """The PostgreSQL database's name, or the SQLite file's path."""
        return self._name if self._name is not None else self.url.removeprefix("sqlite:///")

    @property
    def local_postgres(self) -> bool:
        """True for PostgreSQL on this machine's loopback (its processes can be read)."""
        return self._server_url is not None and (self._server_url.host or "") in _LOOPBACK

    def backend_pids(self) -> set[int]:
        """The server processes of this database's connections (the coordinator's)."""
        rows = _admin_query(
            self._server_url, "SELECT pid FROM pg_stat_activity WHERE datname = :name", {"name": self._name}
        )
        return {int(row[0]) for row in rows}

    def postmaster_pid(self) -> int | None:
        """The PostgreSQL server's main process: the parent of a backend, if it is local."""
        from sqlalchemy import create_engine, text

        engine = create_engine(self._server_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:  # the backend is read while it serves this connection
                stat = procfs.read_stat(int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one()))
        finally:
            engine.dispose()
        if stat is None or not stat.comm.startswith("postgres"):
            return None  # another host, or another PID namespace (a container)
        parent = procfs.read_stat(stat.ppid)
        return stat.ppid if parent is not None and parent.comm.startswith("postgres") else None

    def drop(self) -> None:
        if self._server_url is not None and self._name is not None:
            _admin_execute(self._server_url, f'DROP DATABASE IF EXISTS "{self._name}" WITH (FORCE)')
            self._server_url = None


def _safe(url: Any) -> str:
    return str(url.render_as_string(hide_password=True))


def _admin_execute(server: Any, statement: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


def _admin_query(server: Any, query: str, params: dict[str, Any]) -> list[Sequence[Any]]:
    from sqlalchemy import create_engine, text

    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(query), params)]
    finally:
        engine.dispose()


@dataclass
class Coordinator:
    """A running ``runwick serve`` process."""

    process: subprocess.Popen[bytes]
    target: str
    _drain: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid


def start_coordinator(database_url: str, log: Path, *, processes: str | None = None) -> Coordinator:
    """Starts ``runwick serve`` (``--processes`` when given) and waits until it listens
    (its ready line on stdout)."""
    argv = [
        *(sys.executable, "-m", "coordinator.cli", "serve", "--database-url", database_url),
        *("--host", "127.0.0.1", "--port", "0", "--health-port", "-1", "--metrics-port", "-1"),
        *("--dashboard-port", "-1"),
        *("--insecure", "--drain-timeout", "5", "--log-level", "WARNING"),
        *(("--processes", processes) if processes is not None else ()),
    ]
    log_file = log.open("ab")
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True, env=_child_env({})
    )
    found: list[str] = []
    ready = threading.Event()

    def read_stdout(stream: IO[bytes]) -> None:
        for raw in stream:  # keeps draining after the ready line, so the pipe never fills
            line = raw.decode(errors="replace")
            if not found and line.startswith(READY_LINE):
                found.append(line[len(READY_LINE) :].strip())
                ready.set()
            log_file.write(raw)
        ready.set()

    assert process.stdout is not None
    drain = threading.Thread(target=read_stdout, args=(process.stdout,), daemon=True)
    drain.start()
    ready.wait(COORDINATOR_START_TIMEOUT_S)
    if not found:
        stop_processes([process])
        raise BenchSetupError(f"the coordinator did not start listening; see {log}")
    return Coordinator(process, found[0], drain)


def connection_env(options: argparse.Namespace, target: str) -> dict[str, str]:
    """The ``RUNWICK_*`` variables that give a bench worker the bench's connection."""
    env = {"RUNWICK_TARGET": target}
    for name, value in (("TOKEN", options.token), ("CA", options.ca), ("CERT", options.cert)):
        if value:
            env[f"RUNWICK_{name}"] = value
    if options.key:
        env["RUNWICK_KEY"] = options.key
    env["RUNWICK_TLS"] = "1" if options.tls else ""
    return env


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RUNWICK_")}
    env.update(extra)
    return env


def start_workers(
    count: int, *, sink: Path, queue: str, concurrency: int, env: dict[str, str], logs: Path
) -> list[subprocess.Popen[bytes]]:
    workers = []
    for index in range(count):
        with (logs / f"worker-{index}.log").open("ab") as log:
            workers.append(
                subprocess.Popen(
                    [
                        *(sys.executable, "-m", "coordinator.cli.bench.worker", "--sink", str(sink)),
                        *("--queue", queue, "--concurrency", str(concurrency)),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=_child_env(env),
                )
            )
    return workers


def stop_processes(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (they drain), then SIGKILL what is still running after ``STOP_TIMEOUT_S``."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
