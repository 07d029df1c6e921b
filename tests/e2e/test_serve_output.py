"""What ``runwick serve`` prints, and where the first admin token goes: JSON logs that
parse line by line and never hold a secret, the token shown only on a terminal, written
only to ``--admin-token-file``, or supplied by the operator (``RUNWICK_BOOTSTRAP_TOKEN``,
``RUNWICK_BOOTSTRAP_TOKEN_FILE``); settings read from mounted files (``*_FILE``); a
start-up of a few lines a person reads. Every ``serve`` is a real subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import re
import select
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from coordinator.cli.serve import BOOTSTRAP_BANNER
from coordinator.service.tokens import new_token
from coordinator.store.engine import normalize_url
from tests.e2e.cli import runwick
from tests.support import ROOT, runwick_command, serve, stop, wait_for_line, wait_listening
from tests.support.polling import eventually
from tests.support.processes import NO_FIXED_PORTS

pytestmark = pytest.mark.slow

QUIET = (
    *("--port", "0", "--health-port", "0", "--metrics-port", "0", "--dashboard-port", "0"),
    *("--maintenance-interval", "0.2"),
)


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without ``RUNWICK_*``, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_")}
    env.update(settings)
    return env


def secret_of(token: str) -> str:
    return token.split("_", 2)[2]  # rwk_<id>_<secret>; the secret may hold "_"


def token_rows(database_url: str) -> list[list[str]]:
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            return [[str(cell) for cell in row] for row in conn.execute(text("SELECT * FROM tokens"))]
    finally:
        engine.dispose()


async def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``runwick ARGS`` to its end, with exactly ``env``."""
    return await asyncio.to_thread(
        subprocess.run,
        runwick_command(*args),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def token_names(target: str, token: str) -> list[str]:
    listed = await runwick("tokens", "list", "--json", "--target", target, token=token)
    return [item["name"] for item in json.loads(listed.stdout)["tokens"]]


async def test_json_logs_parse_line_by_line_and_never_hold_the_token(
    database_url: str, tmp_path: Path
) -> None:
    log, token_file = tmp_path / "serve.log", tmp_path / "admin-token"
    process = serve(
        log,
        *("--database-url", database_url, "--log-format", "json", *QUIET),
        *("--admin-token-file", str(token_file)),
        env=clean_env(),
    )
    try:
        target = await wait_listening(process, log)
        token = token_file.read_text().strip()
        assert await token_names(target, token) == ["bootstrap-admin"]  # the file's token works
    finally:
        assert await stop(process) == 0
    printed = log.read_text()
    lines = [json.loads(line) for line in printed.splitlines()]  # every line, stdout and stderr
    assert lines and all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    assert secret_of(token) not in printed and BOOTSTRAP_BANNER not in printed
    messages = [line["message"] for line in lines]
    assert f"bootstrap admin token written to {token_file}" in messages  # the log says where it went
    [ready] = [line for line in lines if line["message"].startswith("runwick coordinator listening on ")]
    assert ready["target"] == target
    assert not [line for line in lines if line["logger"].startswith("alembic")]
    assert not [message for message in messages if "None" in message]


async def test_text_start_up_is_a_few_lines_without_library_noise(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"  # a first start: it migrates
    process = serve(log, "--database-url", database, "--insecure", *QUIET, env=clean_env())
    try:
        await wait_listening(process, log)
    finally:
        assert await stop(process) == 0
    no_ports = ("--port", "0", *NO_FIXED_PORTS)
    second = serve(log, "--database-url", database, "--insecure", *no_ports, env=clean_env())
    try:
        await wait_listening(second, log, count=2)
    finally:
        assert await stop(second) == 0
    first_run, second_start = log.read_text().split("coordinator stopped\n", 1)
    first_start = first_run[: first_run.index("runwick coordinator listening on ")]
    assert len(first_start.splitlines()) <= 5, first_start  # what a person reads, then the target
    assert "database schema migrated from none to " in first_start
    assert "alembic" not in first_start
    assert "health port off, metrics port off, dashboard port off" in second_start  # never "port None"
    assert "migrated" not in second_start and "None" not in second_start


async def test_serving_beyond_loopback_without_tls_warns_loudly(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"
    token_file = tmp_path / "admin-token"
    process = serve(
        log,
        *("--database-url", database, "--host", "0.0.0.0", "--admin-token-file", str(token_file)),
        *QUIET,
        env=clean_env(),
    )
    try:
        await wait_listening(process, log)
    finally:
        assert await stop(process) == 0
    [warning] = [line for line in log.read_text().splitlines() if "PLAINTEXT on 0.0.0.0" in line]
    assert "WARNING" in warning and "--tls-cert and --tls-key" in warning


async def test_the_start_up_heap_is_frozen_before_the_ready_line(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"
    process = serve(
        log, "--database-url", database, "--insecure", "--log-level", "debug", *QUIET, env=clean_env()
    )
    try:
        await wait_listening(process, log)
    finally:
        assert await stop(process) == 0
    before_ready = log.read_text().split("runwick coordinator listening on ", 1)[0]
    [frozen] = re.findall(r"start-up heap frozen: (\d+) objects", before_ready)
    assert int(frozen) > 10_000


async def read_terminal(master: int, until: str, process: subprocess.Popen[bytes]) -> str:
    """What the process wrote to its terminal, up to a line containing ``until``."""
    seen = b""

    def arrived() -> str | None:
        nonlocal seen
        ready, _, _ = select.select([master], [], [], 0)
        if ready:
            with contextlib.suppress(OSError):  # the other end closed
                seen += os.read(master, 65536)
        decoded = seen.decode(errors="replace")
        if until in decoded:
            return decoded
        assert process.poll() is None, decoded
        return None

    return await eventually(arrived, 30.0, what=f"the terminal to show {until!r}")


@pytest.fixture
def terminal() -> Iterator[tuple[int, int]]:
    master, slave = pty.openpty()
    yield master, slave
    for descriptor in (master, slave):
        with contextlib.suppress(OSError):
            os.close(descriptor)


async def test_on_a_terminal_the_token_is_shown_once_and_stays_out_of_the_log(
    tmp_path: Path, terminal: tuple[int, int]
) -> None:
    master, slave = terminal
    log = tmp_path / "stderr.log"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            runwick_command("serve", "--database-url", database, *QUIET),
            cwd=ROOT,
            env=clean_env(),
            stdout=slave,
            stderr=stderr,
        )
    try:
        shown = await read_terminal(master, "runwick coordinator listening on ", process)
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)
    lines = [line.strip() for line in shown.splitlines()]
    token = lines[lines.index(BOOTSTRAP_BANNER) + 1]
    assert token.startswith("rwk_") and shown.count(token) == 1
    assert secret_of(token) not in log.read_text()
    assert "created the bootstrap admin token " + token.split("_")[1] in log.read_text()


async def test_with_no_terminal_and_no_file_no_token_is_made_until_a_start_that_can_hand_it_over(
    tmp_path: Path,
) -> None:
    log, token_file = tmp_path / "serve.log", tmp_path / "admin-token"
    database = f"sqlite:///{tmp_path / 'runwick.db'}"
    process = serve(log, "--database-url", database, *QUIET, env=clean_env())
    try:
        await wait_listening(process, log)
        await wait_for_line(process, log, "no token exists and none was made")
    finally:
        assert await stop(process) == 0
    assert token_rows(database) == []  # a token nobody saw would lock the operator out
    again = serve(
        log, "--database-url", database, *QUIET, "--admin-token-file", str(token_file), env=clean_env()
    )
    try:
        target = await wait_listening(again, log, count=2)
        assert await token_names(target, token_file.read_text().strip()) == ["bootstrap-admin"]
    finally:
        assert await stop(again) == 0


async def test_the_operator_supplies_the_first_admin_token_from_a_mounted_file(
    database_url: str, tmp_path: Path
) -> None:
    token_id, token = new_token()
    mounted = tmp_path / "secret" / "token"
    mounted.parent.mkdir()
    mounted.write_text(token + "\n")  # as `kubectl create secret --from-file` leaves it
    log = tmp_path / "serve.log"
    env = clean_env(RUNWICK_BOOTSTRAP_TOKEN_FILE=str(mounted), RUNWICK_LOG_FORMAT="json")
    process = serve(log, "--database-url", database_url, *QUIET, env=env)
    try:
        target = await wait_listening(process, log)
        assert await token_names(target, token) == ["bootstrap-admin"]
    finally:
        assert await stop(process) == 0
    [row] = token_rows(database_url)
    assert token_id in row and not [cell for cell in row if secret_of(token) in cell]  # stored hashed
    printed = log.read_text()
    assert secret_of(token) not in printed and BOOTSTRAP_BANNER not in printed
    assert f"installed the supplied bootstrap admin token {token_id}" in printed

    # Once tokens exist a supplied one is not used: revoking the first token must stick.
    _, other = new_token()
    again = serve(log, "--database-url", database_url, *QUIET, env=clean_env(RUNWICK_BOOTSTRAP_TOKEN=other))
    try:
        target = await wait_listening(again, log, count=2)
        refused = await runwick("tokens", "list", "--target", target, token=other, check=False)
        assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
        assert await token_names(target, token) == ["bootstrap-admin"]
    finally:
        assert await stop(again) == 0
    assert "tokens exist: the supplied bootstrap token is not used" in log.read_text()
    assert len(token_rows(database_url)) == 1


@pytest.mark.parametrize(
    "settings",
    [
        {"RUNWICK_BOOTSTRAP_TOKEN": "rwk_not-hex_hunter2-is-my-secret"},
        {"RUNWICK_BOOTSTRAP_TOKEN": "rwk_" + "a" * 16 + "_x", "RUNWICK_BOOTSTRAP_TOKEN_FILE": "/dev/null"},
        # A file that exists but cannot be read. A missing one is skipped with a warning:
        # the Kubernetes Secret holding it is optional once a token exists
        # (tests/unit/test_config_files.py).
        {"RUNWICK_BOOTSTRAP_TOKEN_FILE": "/"},
    ],
    ids=["malformed", "both", "unreadable-file"],
)
async def test_a_bad_supplied_token_stops_serve_and_changes_nothing(
    tmp_path: Path, settings: dict[str, str]
) -> None:
    database = tmp_path / "runwick.db"
    result = await run_cli(
        ["serve", "--database-url", f"sqlite:///{database}", *QUIET], clean_env(**settings)
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "RUNWICK_BOOTSTRAP_TOKEN" in result.stderr or "bootstrap token" in result.stderr
    assert "hunter2" not in result.stdout + result.stderr  # the secret is never echoed
    assert not database.exists()  # refused before the store was opened


async def test_the_database_url_is_read_from_a_mounted_file(tmp_path: Path) -> None:
    database = tmp_path / "from-file.db"
    mounted = tmp_path / "url"
    mounted.write_text(f"sqlite:///{database}\n")
    env = clean_env(RUNWICK_DATABASE_URL_FILE=str(mounted))
    migrated = await run_cli(["migrate", "--log-format", "json"], env)
    assert migrated.returncode == 0 and database.exists(), migrated.stderr
    said = [json.loads(line)["message"] for line in (migrated.stdout + migrated.stderr).splitlines()]
    result = json.loads(migrated.stdout)
    assert result["message"].startswith("created the database schema (revision ")
    assert result["revision_before"] is None and result["revision"]
    assert [line for line in said if line.startswith("database schema migrated from none to ")]
    log = tmp_path / "serve.log"
    process = serve(log, "--insecure", *QUIET, env=env)
    try:
        target = await wait_listening(process, log)
        enqueued = await runwick("jobs", "enqueue", "tests.noop", "--json", "--target", target)
        job_id = json.loads(enqueued.stdout)["enqueued"]["id"]
    finally:
        assert await stop(process) == 0
    engine = create_engine(f"sqlite:///{database}")
    try:
        with engine.connect() as conn:
            count = conn.execute(text("SELECT count(*) FROM jobs WHERE id = :id"), {"id": job_id})
            assert count.scalar() == 1
    finally:
        engine.dispose()

    both = clean_env(RUNWICK_DATABASE_URL_FILE=str(mounted), RUNWICK_DATABASE_URL="sqlite:///other.db")
    refused = await run_cli(["migrate"], both)
    assert refused.returncode == 2 and "not both" in refused.stderr
    assert not (ROOT / "other.db").exists()


async def test_a_taken_port_is_named_with_its_flag_before_any_database_is_made(tmp_path: Path) -> None:
    """A second coordinator started beside a running one says which flag to change, and
    creates no database file first (it used to migrate a new SQLite file, then print gRPC
    core's add_port.cc line)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    database = tmp_path / "second.db"
    try:
        result = await runwick(
            "serve",
            "--insecure",
            "--database-url",
            f"sqlite:///{database}",
            "--port",
            "0",
            "--health-port",
            str(taken),
            "--metrics-port",
            "-1",
            "--dashboard-port",
            "-1",
            check=False,
        )
    finally:
        holder.close()
    assert result.returncode == 2, result.stderr
    assert f"port {taken}" in result.stderr and "--health-port" in result.stderr
    assert "add_port" not in result.stderr and "Traceback" not in result.stderr
    assert not database.exists()


async def test_insecure_start_warns_and_the_dashboard_address_is_printed(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    process = serve(
        log, "--database-url", f"sqlite:///{tmp_path / 'r.db'}", "--insecure", *QUIET, env=clean_env()
    )
    try:
        await wait_listening(process, log)
    finally:
        assert await stop(process) == 0
    printed = log.read_text()
    assert "WARNING runwick authentication is OFF (--insecure)" in printed
    assert re.search(r"dashboard port (\d+) \(http://127\.0\.0\.1:\1/\)", printed), printed
