"""``worker_sdk.testing`` in an SDK-only install (no SQLAlchemy, Alembic or psycopg):
``run_handler`` works, and the test coordinator says which extra it needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import worker_sdk

ROOT = Path(worker_sdk.__file__).resolve().parent.parent
WITHOUT_THE_EXTRA = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg'):
            raise ImportError('not installed: ' + name)
sys.meta_path.insert(0, Block())
"""


def run_without_the_extra(code: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", WITHOUT_THE_EXTRA + code]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)


def test_run_handler_needs_no_coordinator() -> None:
    result = run_without_the_extra(
        "from dataclasses import dataclass\n"
        "from worker_sdk import job, Outcome\n"
        "from worker_sdk.testing import NotIdle, run_handler_sync\n"
        "@job('tests.plain')\n"
        "@dataclass\n"
        "class Plain:\n"
        "    name: str\n"
        "run = run_handler_sync(lambda payload, ctx: payload.name.encode(), Plain('p'))\n"
        "assert run.outcome is Outcome.SUCCEEDED and run.output == b'p', run\n"
    )
    assert result.returncode == 0, result.stderr


def test_the_coordinator_names_the_extra_it_needs() -> None:
    result = run_without_the_extra("from worker_sdk.testing import Coordinator\n")
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: worker_sdk.testing.Coordinator")
    assert "pip install 'runwick[testing]'" in last_line
