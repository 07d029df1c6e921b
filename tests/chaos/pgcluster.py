"""A throwaway PostgreSQL cluster for the chaos suite: made with the installed
``initdb`` in a temporary directory, on its own loopback port, so it can be restarted
with ``pg_ctl restart -m immediate`` (a database crash) without touching the shared
server on 127.0.0.1:5432. Run as root, the server programs run as user ``postgres``
(``initdb`` refuses root).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support import free_port

DATABASE = "runwick_chaos"


def _bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        pytest.fail(
            "the chaos suite's throwaway cluster needs PostgreSQL's server programs "
            "(/usr/lib/postgresql/*/bin/initdb): tests/run.sh installs Debian's postgresql"
        )
    return found[-1].parent


class ThrowawayCluster:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        # Not under pytest's tmp_path: that is private to root, and the server may run
        # as postgres.
        self.dir = Path(tempfile.mkdtemp(prefix="runwick-chaos-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0
        self.restarts = 0

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        command = [str(self.bin / program), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}"
            )

    def start(self) -> ThrowawayCluster:
        if self.as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\n"
                # A crash of the server process loses nothing the OS has: no fsync needed.
                "fsync = off\nfull_page_writes = off\nmax_connections = 100\n"
            )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self._run(
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-c",
            f"CREATE DATABASE {DATABASE}",
        )
        return self

    def restart_immediate(self) -> None:
        """A database crash: stop without a checkpoint (-m immediate), then start again."""
        self.restarts += 1
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-m",
            "immediate",
            "-w",
            "-t",
            "60",
            "restart",
        )

    def stop(self) -> None:
        try:
            if self.data.exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""
