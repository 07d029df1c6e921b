"""Packaging: generated code is current; the SDK and client commands need no server dependencies."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support import ROOT


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("generate", ROOT / "protos" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_current() -> None:
    stale = _generator().stale_files()
    assert stale == [], f"regenerate with `python protos/generate.py`: stale {stale}"


def test_generated_modules_import_from_the_sdk_package() -> None:
    from worker_sdk.proto.runwick.v1 import job_service_pb2, worker_service_pb2

    assert job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name == "runwick.v1.JobService"
    assert (
        worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name
        == "runwick.v1.WorkerService"
    )


def test_sdk_does_not_import_the_coordinator_or_sqlalchemy() -> None:
    """The SDK installs and imports without the server's dependencies."""
    import subprocess
    import sys

    code = (
        "import sys, worker_sdk, worker_sdk.testing; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('coordinator', 'sqlalchemy', 'alembic')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_client_commands_work_without_the_server_dependencies() -> None:
    """``pip install runwick`` (no extra) gives ``runwick jobs`` and ``runwick worker``."""
    import subprocess
    import sys

    code = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg'):
            raise ImportError('not installed: ' + name)
sys.meta_path.insert(0, Block())
from coordinator.cli import main
sys.exit(main(['jobs', 'get', 'not-a-uuid', '--target', '127.0.0.1:1']))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert "ImportError" not in result.stderr, result.stderr
    assert result.returncode == 1, result.stdout + result.stderr
    assert "runwick: UNAVAILABLE" in result.stderr


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports (absolute names; relative imports are not used)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module or "")
    return names


def _is_stdlib(module: str) -> bool:
    import sys

    return module.split(".", maxsplit=1)[0] in sys.stdlib_module_names or module == "__future__"


@pytest.mark.parametrize("shared", ["grammar.py", "progress_rules.py"])
def test_the_rules_both_sides_share_import_only_the_standard_library(shared: str) -> None:
    """``worker_sdk.grammar`` and ``worker_sdk.progress_rules`` are rules both sides
    share: pure, stdlib only."""
    imported = _imports(ROOT / "worker_sdk" / shared)
    assert {m for m in imported if not _is_stdlib(m)} == set()


def test_the_domain_imports_only_the_standard_library_and_the_wire_grammar() -> None:
    """``coordinator.domain`` stays pure: stdlib, itself, and the SDK's shared pure rules
    (the wire grammar, the progress report)."""
    for path in sorted((ROOT / "coordinator" / "domain").glob("*.py")):
        others = {
            m
            for m in _imports(path)
            if not (
                _is_stdlib(m)
                or m.startswith("coordinator.domain")
                or m in ("worker_sdk.grammar", "worker_sdk.progress_rules")
            )
        }
        assert others == set(), path.name


def test_the_dashboards_pages_styles_and_script_ship_in_the_package() -> None:
    """No build step: templates and static files are package data, every one of them."""
    import fnmatch
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "coordinator"
    ]
    shipped = [
        path.relative_to(ROOT / "coordinator").as_posix()
        for folder in ("templates", "static")
        for path in sorted((ROOT / "coordinator" / "dashboard" / folder).iterdir())
    ]
    assert len(shipped) > 10
    assert [p for p in shipped if not any(fnmatch.fnmatch(p, g) for g in globs)] == []
