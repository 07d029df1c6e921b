"""Tests that pin how the hot path works (statement counts, SQL fragments, query plans,
caches, benchmarks) carry the ``perf`` marker: ``-m "not perf"`` leaves them out and
keeps the behavioural tests beside them; the default run keeps both."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE = "tests/contract/test_statements_per_write.py"
MECHANISM = "test_a_queue_seen_committed_is_not_looked_up_again"
BEHAVIOUR = "test_a_claim_of_a_queue_never_seen_takes_nothing_and_changes_nothing"


def _collected(*options: str) -> set[str]:
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", *options, FILE],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    return {line.split("::")[1].split("[")[0] for line in collected.stdout.splitlines() if "::" in line}


def test_not_perf_leaves_out_the_mechanism_tests_and_keeps_the_behaviour() -> None:
    kept = _collected("-m", "not perf")
    assert BEHAVIOUR in kept
    assert MECHANISM not in kept


def test_the_default_run_keeps_the_perf_tests() -> None:
    assert {MECHANISM, BEHAVIOUR} <= _collected()
    assert MECHANISM in _collected("-m", "perf")
