"""The layers are a checked contract: ``lint-imports`` (import-linter, configured in
pyproject.toml) passes on the tree and fails when a lower layer imports a higher one."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy_of_the_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("coordinator", "worker_sdk"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _add_import(module: Path, statement: str) -> None:
    module.write_text(module.read_text() + f"\n{statement}  # noqa: E402, F401\n")


def test_the_tree_keeps_every_contract() -> None:
    linted = _lint(ROOT)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "0 broken" in linted.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("coordinator/store/tx.py", "import coordinator.app", "Coordinator layers BROKEN"),
        ("coordinator/domain/states.py", "import coordinator.store", "Coordinator layers BROKEN"),
        ("coordinator/scheduler/due.py", "import coordinator.dispatch", "Coordinator layers BROKEN"),
        (
            "coordinator/api/job_servicer.py",
            "import coordinator.store",
            "Transports reach the store only through the facade BROKEN",
        ),
        (
            "coordinator/dashboard/views.py",
            "import coordinator.service.queues",
            "The dashboard calls only the facade BROKEN",
        ),
        ("coordinator/dashboard/web.py", "import coordinator.api.auth", "Coordinator layers BROKEN"),
        (
            "coordinator/api/job_servicer.py",
            "import coordinator.service.queues",
            "The API uses the facade and value modules of service and dispatch BROKEN",
        ),
        (
            "coordinator/api/worker_servicer.py",
            "from coordinator.dispatch import WorkerSession",
            "The API uses the facade and value modules of service and dispatch BROKEN",
        ),
        (
            "coordinator/domain/states.py",
            "import sqlalchemy",
            "The domain is pure: no third-party package BROKEN",
        ),
        (
            "coordinator/metrics.py",
            "import coordinator.service.batch",
            "Metrics import only the domain and the service's effects BROKEN",
        ),
        (
            "coordinator/service/jobs.py",
            "import coordinator.metrics",
            "Metrics are recorded by the process, the facade and the API only BROKEN",
        ),
        (
            "worker_sdk/_client.py",
            "import coordinator.errors",
            "The SDK stands alone: worker_sdk imports nothing of the coordinator BROKEN",
        ),
    ],
)
def test_an_import_against_the_layers_fails_the_check(
    tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    tree = _copy_of_the_tree(tmp_path)
    _add_import(tree / module, statement)

    linted = _lint(tree)

    assert linted.returncode != 0
    assert contract in linted.stdout, linted.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert importer in linted.stdout


def test_the_domain_imports_only_the_standard_library_and_the_project() -> None:
    """The contract above names the third-party packages the project depends on; this
    catches one added later that the contract does not name yet."""
    foreign = []
    for path in sorted((ROOT / "coordinator" / "domain").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            foreign += [
                f"{path.name}: {name}"
                for name in names
                if name.split(".")[0] not in sys.stdlib_module_names
                and name.split(".")[0] not in {"coordinator", "worker_sdk", "__future__"}
            ]
    assert foreign == [], f"the domain imports third-party modules: {foreign}"
