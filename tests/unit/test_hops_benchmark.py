"""benchmarks/hops.py runs a coordinator and a worker, enqueues paced jobs and prints
each job's hops from the call to the handler's run (the figures themselves are never
asserted)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.perf

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "hops.py"


def test_the_hops_benchmark_stamps_each_job_from_its_call_to_its_run() -> None:
    arguments = ["--jobs", "12", "--rate", "40", "--workers", "1", "--concurrency", "4"]
    command = [sys.executable, str(SCRIPT), *arguments]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert finished.returncode == 0, finished.stderr
    lines = finished.stdout.splitlines()
    first = r"12 of 12 jobs ran; enqueue-to-start p50 [0-9.]+ ms, p90 [0-9.]+ ms"
    assert re.fullmatch(first, lines[0]), lines
    assert re.fullmatch(r"the hop sequence of [0-9]+ of them, .*", lines[1]), lines
    names = [line.split()[-1] for line in lines[2:]]
    # The call reaches the servicer, the worker's engine gets the assignment and the
    # grant, and the handler runs last.
    assert names[0] == "Enqueue>", names
    assert names.count("on_message>") >= 2, names
    assert "_execute>" in names, names
    assert lines[-1].endswith("the handler runs"), lines
    stamps = [float(line.split()[0]) for line in lines[2:]]
    assert stamps == sorted(stamps), lines  # medians of stamps in the order they happen


def test_the_hops_benchmark_refuses_a_count_below_one() -> None:
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), "--jobs", "0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert finished.returncode == 2
    assert "must be positive" in finished.stderr
