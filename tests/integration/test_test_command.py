"""The test command's PostgreSQL step (``tests/postgres.sh``, sourced by ``tests/run.sh``)
leaves the system's PostgreSQL alone: with no server on the port it starts a throwaway
cluster in a temporary directory, used through ``RUNWICK_TEST_PG_ADMIN_URL`` and removed
when the shell exits; with a server there, or a URL given, it starts nothing."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, free_port

pytestmark = pytest.mark.slow

SYSTEM_CONFIG = Path("/etc/postgresql")
PROBE = """
import sys
from sqlalchemy import create_engine
engine = create_engine(sys.argv[1])
with engine.connect() as conn:
    for name in ("data_directory", "config_file", "hba_file", "port"):
        print(name + "=" + str(conn.exec_driver_sql("SHOW " + name).scalar()))
engine.dispose()
"""


def fingerprint(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``directory``: its SHA-256 and modification time."""
    if not directory.exists():
        return {}
    return {
        str(path): (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def source_and_run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``. tests/postgres.sh`` then ``script`` in one bash, with ``RUNWICK_*`` of this
    process left out and ``env`` added."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_TEST_PG")}
    environ.update(env, PYTHON_FOR_TESTS=sys.executable)
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; . tests/postgres.sh; ensure_postgres; {script}"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def test_with_no_server_a_throwaway_cluster_serves_the_run_and_the_system_is_untouched() -> None:
    before = fingerprint(SYSTEM_CONFIG)
    nobody = free_port()  # no server answers here: the step must make its own
    done = source_and_run(
        'echo "url=$RUNWICK_TEST_PG_ADMIN_URL"; echo "dir=$RUNWICK_TEST_PG_DIR";'
        f' "$PYTHON_FOR_TESTS" -c \'{PROBE}\' "$RUNWICK_TEST_PG_ADMIN_URL"',
        RUNWICK_TEST_PG_PORT=str(nobody),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    cluster = Path(said["dir"])
    assert said["url"].startswith("postgresql+psycopg://postgres@127.0.0.1:")
    for setting in ("data_directory", "config_file", "hba_file"):
        assert Path(said[setting]).is_relative_to(cluster), (setting, said[setting])  # its own files
    assert int(said["port"]) != 5432
    assert not cluster.exists()  # stopped and removed when the shell exited
    assert not answers(int(said["port"]))
    assert fingerprint(SYSTEM_CONFIG) == before  # no pg_hba.conf edit, no cluster started


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something answers on, standing in for a running server."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


def test_with_a_server_answering_or_a_url_given_nothing_is_started(listening: int) -> None:
    report = 'echo "url=${RUNWICK_TEST_PG_ADMIN_URL:-}"; echo "dir=${RUNWICK_TEST_PG_DIR:-}"'
    answered = source_and_run(report, RUNWICK_TEST_PG_PORT=str(listening))
    assert answered.returncode == 0, answered.stderr
    assert "url=\ndir=\n" in answered.stdout  # the tests' default URL: the server there
    given = source_and_run(
        report, RUNWICK_TEST_PG_PORT=str(free_port()), RUNWICK_TEST_PG_ADMIN_URL="postgresql://me@db/postgres"
    )
    assert given.returncode == 0, given.stderr
    assert "url=postgresql://me@db/postgres\ndir=\n" in given.stdout


def test_the_test_command_never_edits_the_system_configuration() -> None:
    for script in ("tests/run.sh", "tests/postgres.sh", ".ci/run"):
        text = (ROOT / script).read_text()
        for forbidden in ("pg_hba", "/etc/postgresql", "pg_ctlcluster", "sed -i"):
            assert forbidden not in text, (script, forbidden)
