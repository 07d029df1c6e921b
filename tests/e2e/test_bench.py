"""``runwick bench`` end to end: a few hundred jobs on each engine, against a target with
its own workers and with workers started by hand, and a run that stalls. The figures
are measured, never asserted as speed: only their presence, their consistency and the
exactly-once counts are."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import ADMIN_URL
from tests.integration.conftest import Coordinator
from tests.support import ROOT, eventually, reap, runwick_command, start_process, wait_until

pytestmark = pytest.mark.slow

SMALL = ("--jobs", "300", "--batch", "120", "--concurrency", "16", "--latency-jobs", "20", "--rate", "200")
SMALL += ("--settle", "0.5", "--json")


def bench(*args: str, expect: int = 0) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_")}
    result = subprocess.run(
        runwick_command("bench", *args),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert result.returncode == expect, result.stdout + result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _check_figures(report: dict[str, Any], *, jobs: int, latency_jobs: int, warmup: int = 4) -> None:
    once = report["exactly_once"]
    assert report["ok"] is True and report["stalled"] is None
    assert once == {
        "expected": warmup + latency_jobs + jobs,
        "runs": warmup + latency_jobs + jobs,
        "lost": 0,
        "duplicates": 0,
        "not_succeeded": 0,
    }
    assert report["enqueue"]["jobs"] == jobs and report["enqueue"]["jobs_per_s"] > 0
    processing = report["processing"]
    assert processing["jobs"] == jobs and processing["jobs_per_s"] > 0 and processing["seconds"] > 0
    assert processing["started_before_resume"] == 0
    latency = report["latency"]
    assert latency["jobs"] == latency_jobs and latency["achieved_rate"] > 0
    assert 0 <= latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    cpu = report["cpu"]
    assert cpu["window_s"] > 0 and 0 <= cpu["machine_busy_pct"] <= 100
    assert cpu["seconds"]["workers"] >= 0 and cpu["ms_per_job"]["workers"] >= 0
    assert set(cpu["seconds"]) == {"coordinator", "workers", "database", "database_server", "bench", "other"}


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_local_run_reports_every_figure_and_each_job_ran_once(engine: str) -> None:
    flags = ["--engine", engine, "--workers", "2", "--backlog", "250", *SMALL]
    if engine == "postgres":
        flags += ["--database-url", ADMIN_URL]
    report = bench(*flags)
    _check_figures(report, jobs=300, latency_jobs=20)
    assert (report["setup"]["mode"], report["setup"]["engine"], report["setup"]["workers"]) == (
        "local",
        engine,
        2,
    )
    cpu, memory = report["cpu"], report["memory"]
    assert cpu["seconds"]["coordinator"] > 0 and cpu["ms_per_job"]["coordinator"] > 0
    assert memory["coordinator_peak_kb"] > 0
    assert len(memory["workers_peak_kb"]) == 2 and all(kb > 0 for kb in memory["workers_peak_kb"])
    assert report["backlog"]["jobs"] == 250 and report["backlog"]["jobs_per_s"] > 0
    assert 0 <= report["backlog"]["ran"] <= 250
    if engine == "sqlite":
        assert cpu["seconds"]["database"] is None and "SQLite" in cpu["database_counts"]
        assert not Path(report["setup"]["database"]).exists()  # the temporary folder is gone
    else:  # the local server: its backends are read from /proc
        assert (
            cpu["seconds"]["database"] > 0 and cpu["seconds"]["database_server"] >= cpu["seconds"]["database"]
        )
        admin = create_engine(ADMIN_URL)
        with admin.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM pg_database WHERE datname = :name"),
                {"name": report["setup"]["database"]},
            ).scalar_one()
        admin.dispose()
        assert left == 0  # the scratch database was dropped


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_target_is_measured_from_its_workers_side(coordinator: Coordinator, tmp_path: Path) -> None:
    target = ("--target", coordinator.target)
    report = await _in_thread(*target, "--workers", "1", "--overlap", *SMALL)
    _check_figures(report, jobs=300, latency_jobs=20)
    assert report["setup"]["mode"] == "target" and report["setup"]["overlap"] is True
    assert report["cpu"]["seconds"]["coordinator"] is None and report["memory"]["coordinator_peak_kb"] is None
    assert "--target" in report["cpu"]["database_counts"]

    # Workers the user runs: the bench starts none and reads their records.
    sink = tmp_path / "sink"
    sink.mkdir()
    worker_command = [sys.executable, "-m", "coordinator.cli.bench.worker", "--sink", str(sink)]
    worker = start_process(
        [*worker_command, "--queue", "by-hand", "--concurrency", "8", *target], tmp_path / "worker.log"
    )
    try:
        await eventually(lambda: any(sink.glob("ready-*")) or None, 30, what="the bench worker to connect")
        mine = ("--no-workers", "--sink", str(sink), "--queue", "by-hand")
        report = await _in_thread(*target, *mine, *SMALL)
        _check_figures(report, jobs=300, latency_jobs=20)
        assert report["setup"]["workers"] is None and report["memory"]["workers_peak_kb"] == []
    finally:
        reap(worker)

    # No worker takes the queue: the run stalls, reports it, and exits 1.
    nobody = ("--no-workers", "--sink", str(sink), "--queue", "nobody", "--stall-timeout", "1")
    report = await _in_thread(*target, *nobody, *SMALL, expect=1)
    assert report["ok"] is False and "warm-up" in report["stalled"]
    assert report["exactly_once"]["lost"] == report["exactly_once"]["expected"] == 324
    assert report["exactly_once"]["not_succeeded"] == 4


async def _in_thread(*args: str, expect: int = 0) -> dict[str, Any]:
    """Runs the bench without blocking the in-process coordinator's event loop."""
    return await asyncio.to_thread(bench, *args, expect=expect)


def test_an_unreachable_target_fails_before_any_worker_starts(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_")}
    result = subprocess.run(
        runwick_command("bench", "--target", "127.0.0.1:1", "--work-dir", str(work)),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1 and "UNAVAILABLE" in result.stderr and result.stdout == ""
    assert not list(work.glob("worker-*.log"))  # no worker was started


def _running_with(text: str) -> list[int]:
    """Processes whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_stops_what_the_bench_started(tmp_path: Path) -> None:
    work = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWICK_")}
    process = subprocess.Popen(
        runwick_command("bench", "--work-dir", str(work), "--jobs", "100000", "--latency-jobs", "2000"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: len(list((work / "sink").glob("ready-*"))) == 2, 60, what="both workers to connect"
        )
        started = set(_running_with(str(work))) - {process.pid}
        assert len(started) == 3  # the coordinator and two workers
        process.terminate()
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130 and "interrupted" in stderr
        assert _running_with(str(work)) == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.postgres
def test_a_run_with_two_coordinator_processes_counts_both() -> None:
    """``--processes 2``: the coordinator's CPU and memory are its whole process tree's
    (the first ``serve`` process and its replica), and every job still ran once."""
    single = bench("--engine", "postgres", "--database-url", ADMIN_URL, "--workers", "2", *SMALL)
    double = bench(
        "--engine", "postgres", "--database-url", ADMIN_URL, "--processes", "2", "--workers", "2", *SMALL
    )
    _check_figures(double, jobs=300, latency_jobs=20)
    assert (single["setup"]["processes"], double["setup"]["processes"]) == (None, "2")
    # Two interpreters resident: well over one's peak (each alone holds tens of MB).
    assert double["memory"]["coordinator_peak_kb"] > 1.5 * single["memory"]["coordinator_peak_kb"]
    assert double["cpu"]["seconds"]["coordinator"] > 0
