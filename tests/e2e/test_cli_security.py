"""``runwick serve`` with authentication on, and the management commands end to end:
``tokens create|list|revoke``, ``jobs cancel|retry|reveal-error`` (one job and bulk),
``audit`` - every command a real subprocess against a real coordinator process."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from coordinator.cli.serve import BOOTSTRAP_BANNER
from coordinator.store.engine import normalize_url
from tests.e2e.cli import runwick
from tests.support import WorkerProcess, eventually_async, serve, stop, wait_listening
from tests.support.processes import NO_FIXED_PORTS

pytestmark = pytest.mark.slow


@dataclass
class Served:
    process: subprocess.Popen[str]
    target: str
    admin_token: str
    token_file: Path
    log: Path


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    log, token_file = tmp_path / "serve.log", tmp_path / "admin-token"
    process = serve(
        log,
        *("--database-url", database_url),
        *("--port", "0", *NO_FIXED_PORTS),
        *("--admin-token-file", str(token_file), "--maintenance-interval", "0.2"),
    )
    try:
        target = await wait_listening(process, log)
        token = token_file.read_text().strip()  # stdout is no terminal: the file only
        yield Served(process, target, token, token_file, log)
    finally:
        await stop(process)


async def test_serve_writes_the_bootstrap_token_to_its_file_only_and_stores_only_its_hash(
    served: Served, database_url: str
) -> None:
    assert served.admin_token.startswith("rwk_")
    assert served.token_file.stat().st_mode & 0o777 == 0o600
    printed = served.log.read_text()
    secret = served.admin_token.split("_", 2)[2]  # rwk_<id>_<secret>; the secret may hold "_"
    assert secret not in printed and BOOTSTRAP_BANNER not in printed  # stdout is no terminal
    assert f"bootstrap admin token written to {served.token_file}" in printed
    engine = create_engine(normalize_url(database_url))
    try:
        with engine.connect() as conn:
            rows = [[str(cell) for cell in row] for row in conn.execute(text("SELECT * FROM tokens"))]
    finally:
        engine.dispose()
    assert len(rows) == 1 and not [cell for cell in rows[0] if secret in cell]
    if database_url.startswith("sqlite:///"):
        raw = b"".join(p.read_bytes() for p in Path(database_url[10:]).parent.glob("runwick.db*"))
        assert raw and secret.encode() not in raw  # nowhere in the database files either

    anonymous = await runwick("jobs", "list", "--target", served.target, check=False)
    assert anonymous.returncode == 1 and "UNAUTHENTICATED" in anonymous.stderr


async def test_management_commands_end_to_end(
    served: Served, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    target = ("--target", served.target)
    admin = served.admin_token

    async def create(name: str, *scopes: str, queue: str | None = None) -> dict[str, object]:
        extra = ("--queue", queue) if queue else ()
        made = await runwick(
            "tokens",
            "create",
            "--name",
            name,
            "--scope",
            ",".join(scopes),
            *extra,
            "--json",
            *target,
            token=admin,
        )
        return json.loads(made.stdout)  # type: ignore[no-any-return]

    ops = await create("ops", "enqueue", "read", "manage")
    revealer = await create("revealer", "reveal")
    worker = await create("worker", "work", queue="default")
    ops_token, reveal_token = str(ops["secret"]), str(revealer["secret"])
    listed = await runwick("tokens", "list", *target, token=admin)
    assert all(name in listed.stdout for name in ("bootstrap-admin", "ops", "revealer", "worker")), (
        listed.stdout
    )
    assert ops_token not in listed.stdout

    spawn_worker(served.target, runwick_token=str(worker["secret"]))
    enqueued = await runwick(
        "jobs",
        "enqueue",
        "tests.permanent",
        "--payload",
        '{"order_id": "o-77"}',
        "--json",
        *target,
        token=ops_token,
    )
    job_id = json.loads(enqueued.stdout)["enqueued"]["id"]

    async def job() -> dict[str, object]:
        shown = await runwick("jobs", "get", job_id, "--json", *target, token=ops_token)
        return json.loads(shown.stdout)  # type: ignore[no-any-return]

    async def failed_in(generation: int) -> bool:
        current = (await job())["job"]
        return current["state"] == "failed" and current["generation"] == generation  # type: ignore[index]

    await eventually_async(lambda: failed_in(1), timeout=30, interval=0.1)
    shown = await runwick("jobs", "get", job_id, *target, token=ops_token)
    assert "order_not_found" in shown.stdout  # the code, and the payload (o-77), but
    assert "does not exist" not in shown.stdout  # never the error text in reads
    attempt_id = (await job())["attempts"][0]["id"]  # type: ignore[index]

    refused = await runwick("jobs", "reveal-error", attempt_id, *target, token=ops_token, check=False)
    assert refused.returncode == 1 and "PERMISSION_DENIED" in refused.stderr
    assert "o-77" not in refused.stdout + refused.stderr
    revealed = await runwick("jobs", "reveal-error", attempt_id, *target, token=reveal_token)
    assert "Order o-77 does not exist." in revealed.stdout and "Traceback" in revealed.stdout

    retried = await runwick("jobs", "retry", job_id, *target, token=ops_token)
    assert "generation 2" in retried.stdout
    await eventually_async(lambda: failed_in(2), timeout=30, interval=0.1)
    declined = await runwick(
        "jobs",
        "retry",
        "--state",
        "failed",
        "--wire-name",
        "tests.permanent",
        *target,
        token=ops_token,
        stdin="n\n",
        check=False,
    )
    assert declined.returncode == 1 and "Retry 1 job(s)" in declined.stderr
    assert (await job())["job"]["generation"] == 2  # type: ignore[index]
    bulk = await runwick(
        "jobs",
        "retry",
        "--state",
        "failed",
        "--wire-name",
        "tests.permanent",
        "--yes",
        *target,
        token=ops_token,
    )
    assert bulk.stdout.startswith("retried 1, skipped 0")
    assert bulk.stderr == ""  # one RPC; no progress drawn into a stderr that is no terminal
    await eventually_async(lambda: failed_in(3), timeout=30, interval=0.1)

    late = [
        json.loads(
            (
                await runwick(
                    "jobs",
                    "enqueue",
                    "tests.echo",
                    "--run-at",
                    "2099-01-01T00:00:00Z",
                    "--json",
                    *target,
                    token=ops_token,
                )
            ).stdout
        )["enqueued"]["id"]
        for _ in range(3)
    ]
    cancelled = await runwick("jobs", "cancel", "--state", "scheduled", "--yes", *target, token=ops_token)
    assert cancelled.stdout.startswith("cancelled 3, cancel requested 0 (running), skipped 0")
    assert cancelled.stderr == ""
    again = await runwick("jobs", "cancel", late[0], *target, token=ops_token, check=False)
    assert (
        again.returncode == 1
        and "FAILED_PRECONDITION" in again.stderr
        and "already cancelled" in again.stderr
    )

    audit = json.loads((await runwick("audit", "--json", "--limit", "100", *target, token=admin)).stdout)[
        "events"
    ]
    actions = [(event["action"], event.get("actor_name")) for event in audit]
    assert actions.count(("job.cancel", "ops")) == 3
    assert actions.count(("job.retry", "ops")) == 2
    assert actions.count(("attempt.reveal_error", "revealer")) == 1  # the refused one wrote nothing
    assert ("token.create", "bootstrap-admin") in actions and ("token.create", "coordinator") in actions
    assert all(
        event["peer"].startswith("ipv4:127.0.0.1:") for event in audit if event.get("actor_name") == "ops"
    )
    assert "o-77" not in json.dumps(audit)
    no_admin = await runwick("audit", *target, token=ops_token, check=False)
    assert no_admin.returncode == 1 and "PERMISSION_DENIED" in no_admin.stderr

    revoked = await runwick("tokens", "revoke", str(ops["token"]["id"]), *target, token=admin)  # type: ignore[index]
    assert "revoked token" in revoked.stdout
    gone = await runwick("jobs", "list", *target, token=ops_token, check=False)
    assert gone.returncode == 1 and "UNAUTHENTICATED" in gone.stderr
    listing = await runwick("tokens", "list", "--all", "--json", *target, token=admin)
    everything = json.loads(listing.stdout)["tokens"]
    assert [t["name"] for t in everything if t["revoked_at"] is not None] == ["ops"]


async def test_serve_refuses_insecure_off_loopback(tmp_path: Path) -> None:
    result = await runwick(
        "serve",
        "--insecure",
        "--host",
        "0.0.0.0",
        "--database-url",
        f"sqlite:///{tmp_path / 'r.db'}",
        check=False,
    )
    assert result.returncode == 2 and "refused" in result.stderr and "loopback" in result.stderr


async def test_the_token_can_come_from_a_file_and_never_shows_in_the_command_line(
    served: Served, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(served.admin_token + "\n")  # as `echo` or an editor leaves it
    target = ("--target", served.target)

    listed = await runwick("tokens", "list", *target, "--token-file", str(token_file), "--json")
    assert [token["name"] for token in json.loads(listed.stdout)["tokens"]] != []

    both = await runwick(
        "tokens", "list", *target, "--token", served.admin_token, "--token-file", str(token_file), check=False
    )
    assert both.returncode == 2
    assert "--token-file: not allowed with argument --token" in both.stderr

    missing = await runwick("tokens", "list", *target, "--token-file", str(tmp_path / "nope"), check=False)
    assert missing.returncode == 2
    assert f"--token-file: cannot read the token file {tmp_path / 'nope'}: No such file or directory" in (
        missing.stderr
    )
