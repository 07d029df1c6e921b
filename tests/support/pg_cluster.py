"""A throwaway PostgreSQL cluster: ``initdb`` of the installed server programs in a
directory of its own, trust auth on loopback, its own port and socket directory. Nothing
outside that directory is read or changed (no system ``pg_hba.conf``, no cluster of the
system's); stopping it removes the directory.

``tests/run.sh`` starts one when no server answers on 127.0.0.1:5432 and no
``RUNWICK_TEST_PG_ADMIN_URL`` is given::

    python -m tests.support.pg_cluster start DIR   # prints the admin URL
    python -m tests.support.pg_cluster stop DIR    # stops it and removes DIR

Run as root, the server programs run as user ``postgres`` (``initdb`` refuses root;
Debian's ``postgresql`` package makes that user).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

PORT_FILE = "port"


class ClusterError(RuntimeError):
    """The cluster could not be made, started or stopped; the message says why."""


def server_bin_dir() -> Path | None:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` are: the newest Debian version under
    /usr/lib/postgresql, else the directory of ``initdb`` on PATH."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0,
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayCluster:
    """A cluster in ``directory`` (made if missing; it must be empty)."""

    def __init__(self, directory: Path, port: int | None = None, bin_dir: Path | None = None) -> None:
        self.dir = directory
        self.data = directory / "data"
        self.log = directory / "postgres.log"
        found = bin_dir or server_bin_dir()
        if found is None:
            raise ClusterError(
                "PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
                "install Debian's postgresql package"
            )
        self.bin = found
        saved = directory / PORT_FILE
        self.port = port or (int(saved.read_text()) if saved.exists() else free_port())
        self.as_postgres = os.geteuid() == 0

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, timeout: float = 120) -> None:
        command = [str(self.bin / program), *args]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise ClusterError(
                f"{program} {' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}"
            )

    def start(self) -> ThrowawayCluster:
        self.dir.mkdir(parents=True, exist_ok=True)
        if any(self.dir.iterdir()):
            raise ClusterError(f"{self.dir} is not empty: a throwaway cluster needs a directory of its own")
        if self.as_postgres:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise ClusterError("running as root needs a postgres user for the server programs") from None
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\n"
                # Test data: a crash may lose it, so no fsync is needed.
                "fsync = off\nfull_page_writes = off\nsynchronous_commit = on\nmax_connections = 200\n"
            )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        (self.dir / PORT_FILE).write_text(str(self.port))
        return self

    def stop(self) -> None:
        """Stops the server (fast shutdown) and removes the directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.support.pg_cluster start|stop DIR", file=sys.stderr)
        return 2
    action, directory = argv[0], Path(argv[1])
    try:
        if action == "start":
            print(ThrowawayCluster(directory).start().admin_url)
        elif directory.exists():
            ThrowawayCluster(directory).stop()
    except ClusterError as exc:
        print(f"pg_cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
