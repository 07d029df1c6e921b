"""benchmarks/enqueue_request.py builds, decodes, checks and answers every job of its
requests and reports the CPU per job of each side (the figures themselves are never
asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.perf

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "enqueue_request.py"


def test_the_enqueue_request_benchmark_answers_every_job_and_reports_cpu_per_job() -> None:
    command = [sys.executable, str(SCRIPT), "--jobs", "20", "--requests", "3"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert finished.returncode == 0, finished.stderr
    assert re.fullmatch(
        r"SDK request [0-9.]+ µs, coordinator decode\+check\+answer [0-9.]+ µs of CPU per job "
        r"\(60 jobs, 20 a request\)\n",
        finished.stdout,
    ), finished.stdout
