"""The ``runwick`` command as people and scripts meet it, through real subprocesses
against a real coordinator (each engine): version, completion, flags and their help,
pipes, one JSON shape per object, paging, terminal-sized tables, bulk actions by filter,
enqueue settings and ``--wait``, connected workers, and the messages for common mistakes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from coordinator.cli import build_parser
from tests.e2e.cli import runwick
from tests.integration.conftest import Coordinator
from tests.support import ROOT, WorkerProcess, runwick_command
from worker_sdk import AsyncClient, JobState
from worker_sdk import _identity as identity

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_")}
    env.update(extra)
    return env


async def _shell(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Runs ``script`` in bash with ``$RUNWICK`` as the command line of this checkout."""
    command = " ".join(runwick_command())
    return await asyncio.to_thread(
        subprocess.run,
        ["bash", "-c", script],
        cwd=ROOT,
        env=_env(RUNWICK=command, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# -- the parser ------------------------------------------------------------------------


def _parsers(
    parser: argparse.ArgumentParser, path: str = "runwick"
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _parsers(sub, f"{path} {name}")
    return found


def test_every_flag_and_argument_has_help_and_no_parser_takes_abbreviations() -> None:
    missing = []
    for path, parser in _parsers(build_parser()):
        assert parser.allow_abbrev is False, path
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            text = (action.help or "").strip()
            if not text or text.startswith("["):  # only an environment variable is no help
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


async def test_version_and_help() -> None:
    version = await runwick("--version")
    assert version.stdout.startswith("runwick ") and version.stdout.split()[1][0].isdigit()
    helped = await runwick("jobs", "list", "--help")
    assert "--limit N" in helped.stdout and "1 to 500" in helped.stdout and "--page-token" in helped.stdout
    enqueue = await runwick("jobs", "enqueue", "--help")
    assert "library defaults (3 executions" in " ".join(enqueue.stdout.split())


async def test_the_output_mode_comes_from_the_flag_or_runwick_output(coordinator: Coordinator) -> None:
    command = runwick_command("queues", "list", "--target", coordinator.target)

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, cwd=ROOT, env=_env(**env), capture_output=True, text=True, check=False)

    assert json.loads((await asyncio.to_thread(run, RUNWICK_OUTPUT="json")).stdout) == {
        "queues": [],
        "next_page_token": "",
    }
    wrong = await asyncio.to_thread(run, RUNWICK_OUTPUT="yaml")
    assert wrong.returncode == 2 and "RUNWICK_OUTPUT must be one of table, wide, json" in wrong.stderr


async def test_an_abbreviated_flag_is_refused_not_guessed() -> None:
    stat = await runwick("jobs", "list", "--stat", "failed", "--target", "127.0.0.1:1", check=False)
    assert stat.returncode == 2 and "unrecognized arguments: --stat failed" in stat.stderr


@pytest.mark.parametrize("bad", ["0", "-1", "5000", "ten"])
async def test_a_limit_out_of_range_is_a_usage_error(bad: str) -> None:
    result = await runwick("jobs", "list", "--limit", bad, "--target", "127.0.0.1:1", check=False)
    assert result.returncode == 2 and "--limit" in result.stderr
    assert "1 to 500" in result.stderr or "not a whole number" in result.stderr
    assert "Traceback" not in result.stderr


# -- completion ------------------------------------------------------------------------


async def test_bash_completion_completes_commands_flags_and_choices(tmp_path: Path) -> None:
    # The completion script runs the command named `runwick` on the PATH: this checkout's.
    shim = tmp_path / "runwick"
    shim.write_text(f'#!/bin/sh\nexec {" ".join(runwick_command())} "$@"\n')
    shim.chmod(0o755)

    async def complete(line: str) -> list[str]:
        words = line.split(" ")
        script = textwrap.dedent(
            f"""
            source <(runwick completion bash)
            COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}
            COMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}
            _python_argcomplete runwick
            printf '%s\\n' "${{COMPREPLY[@]}}"
            """
        )
        done = await _shell(script, PATH=f"{tmp_path}:{os.environ['PATH']}")
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert await complete("runwick jo") == ["jobs"]
    assert await complete("runwick jobs l") == ["list"]
    assert await complete("runwick jobs list --state f") == ["failed"]
    assert await complete("runwick jobs list --pa") == ["--page-token"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
async def test_completion_scripts_for_each_shell(shell: str) -> None:
    script = await runwick("completion", shell)
    assert "runwick" in script.stdout and "_ARGCOMPLETE" in script.stdout
    unknown = await runwick("completion", "powershell-ish", check=False)
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


# -- pipes and JSON --------------------------------------------------------------------


async def _enqueue_many(client: AsyncClient, count: int, **kwargs: object) -> list[str]:
    ids = []
    for n in range(count):
        item = await client.enqueue_raw("tests.echo", f'{{"text": "job {n}"}}'.encode(), **kwargs)  # type: ignore[arg-type]
        ids.append(item.id)
    return ids


async def test_a_reader_that_stops_early_ends_the_command_quietly(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    job = await client.enqueue_raw("tests.echo", b'{"text": "' + b"x" * 400 + b'"}')
    await _enqueue_many(client, 150)  # --json of them all is far more than a pipe holds
    target = f"--target {coordinator.target}"
    got = await _shell(f"set -o pipefail; $RUNWICK jobs get {job.id} {target} | head -5")
    assert "Traceback" not in got.stderr and "BrokenPipeError" not in got.stderr
    assert got.stdout.splitlines()[0].split() == ["id", job.id]
    listed = await _shell(f"set -o pipefail; $RUNWICK jobs list --all --json {target} | head -c 100")
    assert len(listed.stdout) == 100
    assert listed.stderr == "" and listed.returncode == 141  # as a process ended by SIGPIPE


async def test_one_json_shape_per_object_across_commands(coordinator: Coordinator) -> None:
    target = ("--target", coordinator.target)
    enqueued = json.loads(
        (
            await runwick("jobs", "enqueue", "tests.echo", "--payload", '{"text": "hi"}', "--json", *target)
        ).stdout
    )
    assert set(enqueued) == {"enqueued"}
    assert enqueued["enqueued"]["state"] == JobState.AVAILABLE.value == "available"
    job_id = enqueued["enqueued"]["id"]
    got = json.loads((await runwick("jobs", "get", job_id, "--json", *target)).stdout)
    listed = json.loads((await runwick("jobs", "list", "--json", *target)).stdout)
    cancelled = json.loads((await runwick("jobs", "cancel", job_id, "--json", *target)).stdout)
    retried = json.loads((await runwick("jobs", "retry", job_id, "--json", *target)).stdout)
    shapes = [got["job"], listed["jobs"][0], cancelled["job"], retried["job"]]
    assert all(list(shape) == list(got["job"]) for shape in shapes)  # same keys, same order
    assert [shape["state"] for shape in shapes] == ["available", "available", "cancelled", "available"]
    assert (got["job"]["payload"], got["job"]["payload_base64"]) == ({"text": "hi"}, None)
    assert listed["jobs"][0]["payload"] is None  # lists carry no payloads
    assert listed["next_page_token"] == ""
    people = (await runwick("jobs", "get", job_id, *target)).stdout
    assert any(line.split() == ["payload", '{"text":', '"hi"}'] for line in people.splitlines())
    assert any(line.split() == ["output", "-"] for line in people.splitlines())


async def test_paging_follows_tokens_or_takes_every_page(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    ids = await _enqueue_many(client, 5)
    target = ("--target", coordinator.target)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        extra = ("--page-token", token) if token else ()
        page = json.loads((await runwick("jobs", "list", "--limit", "2", "--json", *extra, *target)).stdout)
        assert len(page["jobs"]) <= 2
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        token = page["next_page_token"]
        if not token:
            break
    assert (sorted(seen), pages) == (sorted(ids), 3)
    everything = json.loads((await runwick("jobs", "list", "--all", "--json", *target)).stdout)
    assert sorted(j["id"] for j in everything["jobs"]) == sorted(ids)
    table = await runwick("jobs", "list", "--limit", "2", *target)
    assert "more jobs: add --page-token " in table.stderr
    bad = await runwick("jobs", "list", "--page-token", "garbage!", *target, check=False)
    assert bad.returncode == 2 and "page_token" in bad.stderr  # bad input, found by the coordinator
    both = await runwick("jobs", "list", "--all", "--page-token", "x", *target, check=False)
    assert both.returncode == 2 and "not allowed with" in both.stderr


async def test_tables_fit_the_terminal_and_wide_cuts_nothing(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    long_name = "reports.quarterly_revenue_by_region_and_product_line"
    made = await client.enqueue_raw(long_name, b"{}", queue="finance-reporting-batch")
    target = ("--target", coordinator.target)
    for columns in ("80", "60"):
        env = {"COLUMNS": columns}
        for command in (("jobs", "list"), ("audit",), ("tokens", "list"), ("queues", "list")):
            shown = await asyncio.to_thread(
                subprocess.run,
                runwick_command(*command, *target),
                cwd=ROOT,
                env=_env(**env),
                capture_output=True,
                text=True,
                check=True,
            )
            widths = [len(line) for line in shown.stdout.splitlines()]
            assert max(widths, default=0) <= int(columns), (command, shown.stdout)
    narrow = await asyncio.to_thread(
        subprocess.run,
        runwick_command("jobs", "list", *target),
        cwd=ROOT,
        env=_env(COLUMNS="80"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert made.id in narrow.stdout and long_name not in narrow.stdout and "…" in narrow.stdout  # IDs whole
    piped_env = {k: v for k, v in _env().items() if k != "COLUMNS"}
    piped = await asyncio.to_thread(
        subprocess.run,
        runwick_command("jobs", "list", *target),
        cwd=ROOT,
        env=piped_env,
        capture_output=True,
        text=True,
        check=True,
    )
    # Into a pipe, nothing is cut: a script grepping for a state or a name must find it.
    assert made.id in piped.stdout and long_name in piped.stdout and "…" not in piped.stdout
    wide = (await runwick("jobs", "list", "--output", "wide", *target)).stdout
    assert made.id in wide and long_name in wide and "finance-reporting-batch" in wide
    assert "\x1b[" not in narrow.stdout + piped.stdout + wide  # no colour codes into a pipe


# -- bulk actions ------------------------------------------------------------------------


async def test_bulk_cancel_and_retry_are_one_call_each_and_audited_per_job(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    late = await _enqueue_many(client, 30, run_at=_far_future())
    other = await client.enqueue_raw("tests.other", b"{}", run_at=_far_future())
    target = ("--target", coordinator.target)
    calls = coordinator.running.app.metrics  # the RPC count is not exported per method here
    assert calls is not None

    cancelled = await runwick(
        "jobs", "cancel", "--state", "scheduled", "--wire-name", "tests.echo", "--yes", "--json", *target
    )
    assert json.loads(cancelled.stdout) == {
        "cancelled": 30,
        "cancel_requested": 0,
        "skipped": 0,
        "skipped_jobs": [],
    }
    assert cancelled.stderr == ""  # not a terminal: no progress drawn
    assert (await client.get(other.id)).state is JobState.SCHEDULED  # the filter held
    events = [e async for e in client.list_audit_events(action="job.cancel")]
    assert sorted(e.target for e in events) == sorted(late)
    assert all("bulk: state scheduled, wire name tests.echo" in (e.detail or "") for e in events)

    retried = await runwick("jobs", "retry", "--state", "cancelled", "--yes", *target)
    assert retried.stdout.startswith("retried 30, skipped 0")
    states = {(await client.get(job_id)).state for job_id in late}
    assert states == {JobState.AVAILABLE}

    refused = await runwick("jobs", "cancel", "--state", "succeeded", "--yes", *target, check=False)
    assert (
        refused.returncode == 2 and "INVALID_ARGUMENT" in refused.stderr and "filter.state" in refused.stderr
    )
    nothing = await runwick("jobs", "cancel", "--queue", "nowhere", "--yes", "--json", *target)
    assert json.loads(nothing.stdout)["cancelled"] == 0
    declined = await runwick("jobs", "cancel", "--wire-name", "tests.echo", *target, stdin="n\n", check=False)
    assert declined.returncode == 1 and "Cancel 30 job(s)" in declined.stderr
    assert {(await client.get(job_id)).state for job_id in late} == {JobState.AVAILABLE}


def _far_future():  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime

    return datetime(2099, 1, 1, tzinfo=UTC)


# -- enqueue settings, --wait, workers -----------------------------------------------------


async def test_enqueue_takes_settings_and_waits_for_the_end(
    coordinator: Coordinator, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    target = ("--target", coordinator.target)
    args = ("--max-executions", "5", "--retry-delay", "10s,5m", "--execution-timeout", "90s")
    queued = json.loads(
        (
            await runwick(
                "jobs",
                "enqueue",
                "tests.nobody",
                *args,
                "--run-at",
                "2099-01-01T00:00:00Z",
                "--json",
                *target,
            )
        ).stdout
    )
    settings = json.loads((await runwick("jobs", "get", queued["enqueued"]["id"], "--json", *target)).stdout)[
        "job"
    ]["settings"]
    assert (settings["max_executions"], settings["retry_initial_delay_s"], settings["retry_max_delay_s"]) == (
        5,
        10.0,
        300.0,
    )
    assert settings["execution_timeout_s"] == 90.0

    spawn_worker(coordinator.target)
    done = await runwick(
        "jobs", "enqueue", "tests.echo", "--payload", '{"text": "waited"}', "--wait", "30s", "--json", *target
    )
    shown = json.loads(done.stdout)
    assert shown["job"]["state"] == "succeeded" and shown["existing"] is False
    assert shown["job"]["output_base64"] is not None  # plain text, not JSON: base64
    assert [a["outcome"] for a in shown["attempts"]] == ["succeeded"]
    failed = await runwick(
        "jobs",
        "enqueue",
        "tests.permanent",
        "--payload",
        '{"order_id": "o-1"}',
        "--wait",
        *target,
        check=False,
    )
    assert failed.returncode == 1 and "failed" in failed.stdout

    workers = json.loads((await runwick("workers", "list", "--json", *target)).stdout)
    assert workers["replica"] == coordinator.running.app.replica
    [worker] = workers["workers"]
    assert (worker["queues"], worker["capacity"], worker["in_flight"]) == (["default"], 4, 0)
    assert worker["connected_at"].endswith("Z") and "tests.echo" in worker["wire_names"]
    # The worker process's Hello named its machine and SDK; ListWorkers passes them on.
    assert (worker["host"], worker["sdk"]) == (identity.host(), identity.sdk())
    table = await runwick("workers", "list", *target)
    assert table.stdout.splitlines()[0].split() == [
        "worker",
        "host",
        "sdk",
        "queues",
        "capacity",
        "in",
        "flight",
        "connected",
    ]
    assert worker["worker_id"] in table.stdout and "1 worker stream(s)" in table.stderr
    assert identity.sdk() in table.stdout


async def test_bad_input_gets_a_message_a_person_can_act_on(coordinator: Coordinator, tmp_path: Path) -> None:
    run_at = await runwick(
        "jobs", "enqueue", "a.b", "--run-at", "next tuesday", "--target", "127.0.0.1:1", check=False
    )
    assert (
        run_at.returncode == 2
        and "not an ISO 8601 time" in run_at.stderr
        and "Traceback" not in run_at.stderr
    )
    naive = await runwick(
        "jobs", "enqueue", "a.b", "--run-at", "2026-12-01T10:00:00", "--target", "x:1", check=False
    )
    assert naive.returncode == 2 and "has no time zone" in naive.stderr
    delay = await runwick("jobs", "enqueue", "a.b", "--retry-delay", "soon", "--target", "x:1", check=False)
    assert delay.returncode == 2 and "--retry-delay" in delay.stderr

    unreachable = await runwick("jobs", "list", "--target", "127.0.0.1:1", check=False)
    assert unreachable.returncode == 1
    assert "--target" in unreachable.stderr and "RUNWICK_TARGET" in unreachable.stderr

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = await runwick("migrate", "--database-url", url)
    assert first.stdout.startswith("created the database schema (revision ")
    again = await runwick("migrate", "--database-url", url)
    assert "already up to date" in again.stdout and "nothing changed" in again.stdout


def test_serve_without_the_coordinators_dependencies_says_what_to_install() -> None:
    code = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg'):
            raise ModuleNotFoundError('No module named ' + repr(name), name=name)
sys.meta_path.insert(0, Block())
from coordinator.cli import main
sys.exit(main(sys.argv[1:]))
"""
    for command in (["serve", "--port", "0", "--insecure"], ["migrate"]):
        result = subprocess.run(
            [sys.executable, "-c", code, *command], capture_output=True, text=True, cwd=ROOT, check=False
        )
        assert result.returncode == 2, result.stderr
        assert "pip install runwick-coordinator" in result.stderr and "Traceback" not in result.stderr


async def test_bulk_progress_shows_only_on_a_terminal(coordinator: Coordinator, client: AsyncClient) -> None:
    """With stderr on a terminal (a pseudo-terminal here) the bulk call draws its
    spinner there; stdout, a pipe, gets only the result."""
    import pty

    await _enqueue_many(client, 3, run_at=_far_future())
    primary, secondary = pty.openpty()
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            runwick_command(
                "jobs", "cancel", "--state", "scheduled", "--yes", "--target", coordinator.target
            ),
            cwd=ROOT,
            env=_env(TERM="xterm"),
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            timeout=60,
            check=False,
        )
        os.close(secondary)
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65_536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(primary)
    assert done.returncode == 0 and done.stdout.startswith("cancelled 3")
    assert b"cancel of the jobs with state scheduled in progress" in drawn
