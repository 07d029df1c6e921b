"""benchmarks/store_path.py runs the writes of a job end to end on both engines and
reports CPU per job for each way (the figures themselves are never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.perf

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "store_path.py"
LINE = re.compile(
    r"^(light|batched|wide) +user [0-9.]+ +system [0-9.]+ +wall [0-9.]+ ms per job \((\d+) jobs\)$"
)


def test_the_store_path_benchmark_runs_every_job_to_success(unmigrated_url: str) -> None:
    postgres = unmigrated_url.startswith("postgresql")
    command = [
        sys.executable,
        str(SCRIPT),
        "--light-jobs",
        "3",
        "--batched-jobs",
        "128",
        "--batch",
        "64",
        "--wide-jobs",
        "3",
    ]
    if postgres:
        command += ["--database-url", unmigrated_url]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert finished.returncode == 0, finished.stderr
    lines = [LINE.match(line) for line in finished.stdout.splitlines()]
    assert [(m.group(1), m.group(2)) for m in lines if m] == [
        ("light", "3"),
        ("batched", "128"),
        ("wide", "3"),
    ], finished.stdout
    if postgres:  # the SQLite file is the script's own, in a folder it removes
        engine = create_engine(unmigrated_url)
        try:
            with engine.connect() as conn:
                states = dict(conn.execute(text("SELECT state, count(*) FROM jobs GROUP BY state")).all())
        finally:
            engine.dispose()
        # Warm-ups (one light job; 12 batched jobs make no whole batch of 64; one wide job)
        # and the measured ones.
        assert states == {"succeeded": 1 + 3 + 128 + 1 + 3}


def test_a_way_given_no_jobs_is_skipped() -> None:
    command = [sys.executable, str(SCRIPT), "--light-jobs", "0", "--batched-jobs", "64", "--batch", "64"]
    command += ["--wide-jobs", "0"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert finished.returncode == 0, finished.stderr
    lines = [LINE.match(line) for line in finished.stdout.splitlines()]
    assert [(m.group(1), m.group(2)) for m in lines if m] == [("batched", "64")], finished.stdout
