"""benchmarks/metrics_cost.py counts every job it feeds the coordinator's metrics and
reports their CPU per job (the figure itself is never asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.perf

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "metrics_cost.py"


def test_the_metrics_cost_benchmark_counts_every_job_and_reports_cpu_per_job() -> None:
    command = [sys.executable, str(SCRIPT), "--batch", "16", "--batches", "5", "--queues", "2"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert finished.returncode == 0, finished.stderr
    assert re.fullmatch(r"[0-9.]+ µs of CPU per job \(80 jobs, 16 a batch\)\n", finished.stdout), (
        finished.stdout
    )
