"""Packaging: generated code is current; the SDK and client commands need no server
dependencies; the two distributions (``runwick``, the SDK, from pyproject.toml, and
``runwick-coordinator`` from packaging/coordinator/) declare what their code imports and
travel at one version."""

from __future__ import annotations

import importlib.util
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import ROOT

SDK_DIST = ROOT
"""The SDK's distribution, ``runwick``: the repository's root pyproject.toml."""
COORDINATOR_DIST = ROOT / "packaging" / "coordinator"
"""``runwick-coordinator``: the coordinator package and the ``runwick`` command."""
TOOLING_EXTRAS = frozenset({"dev", "examples", "coordinator"})
"""Extras of the SDK that are not its code's to import (tests, examples, the other half)."""


def _pyproject(distribution: Path) -> dict[str, Any]:
    return tomllib.loads((distribution / "pyproject.toml").read_text())


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
    """``runwick jobs`` and ``runwick worker`` load no server dependency: they start
    fast, and a partial install still runs them."""
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


def _imports(path: Path, *, allow_relative: bool = False) -> set[str]:
    """The modules ``path`` imports (absolute names; relative imports are refused unless
    ``allow_relative``, and then left out: they stay inside the package)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 or allow_relative, f"{path}: relative import"
            if node.level == 0:
                names.add(node.module or "")
    return names


def _is_stdlib(module: str) -> bool:
    import sys

    return module.split(".", maxsplit=1)[0] in sys.stdlib_module_names or module == "__future__"


@pytest.mark.parametrize("shared", ["grammar.py", "progress_rules.py", "trace_rules.py"])
def test_the_rules_both_sides_share_import_only_the_standard_library(shared: str) -> None:
    """``worker_sdk.grammar``, ``progress_rules`` and ``trace_rules`` are rules both
    sides share: pure, stdlib only."""
    imported = _imports(ROOT / "worker_sdk" / shared)
    assert {m for m in imported if not _is_stdlib(m)} == set()


def test_the_domain_imports_only_the_standard_library_and_the_wire_grammar() -> None:
    """``coordinator.domain`` stays pure: stdlib, itself, and the SDK's shared pure rules
    (the wire grammar, the progress report, the trace context)."""
    for path in sorted((ROOT / "coordinator" / "domain").glob("*.py")):
        others = {
            m
            for m in _imports(path)
            if not (
                _is_stdlib(m)
                or m.startswith("coordinator.domain")
                or m in ("worker_sdk.grammar", "worker_sdk.progress_rules", "worker_sdk.trace_rules")
            )
        }
        assert others == set(), path.name


def test_the_dashboards_pages_styles_and_script_ship_in_the_package() -> None:
    """No build step: templates and static files are package data, every one of them."""
    import fnmatch

    globs = _pyproject(COORDINATOR_DIST)["tool"]["setuptools"]["package-data"]["coordinator"]
    shipped = [
        path.relative_to(ROOT / "coordinator").as_posix()
        for folder in ("templates", "static")
        for path in sorted((ROOT / "coordinator" / "dashboard" / folder).iterdir())
    ]
    assert len(shipped) > 10
    assert [p for p in shipped if not any(fnmatch.fnmatch(p, g) for g in globs)] == []


def _declared(distribution: Path, *, skip_extras: frozenset[str] = frozenset()) -> set[str]:
    """Canonical names of what ``distribution`` depends on, its extras (but ``skip_extras``) included."""
    project = _pyproject(distribution)["project"]
    extras = [
        spec
        for name, specs in project.get("optional-dependencies", {}).items()
        if name not in skip_extras
        for spec in specs
    ]
    return {canonicalize_name(Requirement(spec).name) for spec in project["dependencies"] + extras}


def _third_party_imports(package: str) -> set[str]:
    """Top-level names of the modules outside the standard library and this repository
    that ``package``'s modules import (generated protobuf code included)."""
    found = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        for module in _imports(path, allow_relative=True):
            top = module.split(".")[0]
            if top and not _is_stdlib(module) and top not in ("coordinator", "worker_sdk"):
                found.add(top)
    return found


@pytest.mark.parametrize(
    ("package", "distributions"),
    [
        ("worker_sdk", [SDK_DIST]),
        ("coordinator", [COORDINATOR_DIST, SDK_DIST]),
    ],
)
def test_every_third_party_module_a_package_imports_is_a_dependency_of_its_distribution(
    package: str, distributions: list[Path]
) -> None:
    """An import the development environment satisfies but the package's distribution
    does not declare would pass every other test and fail in a user's install. The SDK may
    import only its own dependencies (never rich or SQLAlchemy); the coordinator its own
    and the SDK's."""
    declared = set().union(*(_declared(d, skip_extras=TOOLING_EXTRAS) for d in distributions))
    providers = packages_distributions()
    undeclared = {
        module: providers.get(module, ["(not installed)"])
        for module in _third_party_imports(package)
        if not {canonicalize_name(d) for d in providers.get(module, [])} & declared
    }
    assert undeclared == {}


def test_the_sdk_distribution_holds_the_sdk_alone() -> None:
    """What a service embeds: the package worker_sdk and four dependencies, no command,
    nothing of the coordinator or its command-line libraries."""
    sdk = _pyproject(SDK_DIST)
    assert sdk["tool"]["setuptools"]["packages"]["find"]["include"] == ["worker_sdk*"]
    assert set(sdk["tool"]["setuptools"]["package-data"]) == {"worker_sdk"}
    assert "scripts" not in sdk["project"]
    assert {canonicalize_name(Requirement(s).name) for s in sdk["project"]["dependencies"]} == {
        "grpcio",
        "protobuf",
        "prometheus-client",
        "googleapis-common-protos",
    }


def test_the_two_distributions_travel_at_one_version() -> None:
    """runwick-coordinator needs the SDK of its own release (it imports the generated
    protobuf modules from it), and the SDK's ``coordinator`` extra names that release."""
    sdk, coordinator = _pyproject(SDK_DIST)["project"], _pyproject(COORDINATOR_DIST)["project"]
    assert coordinator["name"] == "runwick-coordinator" and sdk["name"] == "runwick"
    assert coordinator["version"] == sdk["version"]
    assert f"runwick=={sdk['version']}" in coordinator["dependencies"]
    assert sdk["optional-dependencies"]["coordinator"] == [f"runwick-coordinator=={sdk['version']}"]
    assert coordinator["scripts"] == {"runwick": "coordinator.cli:main"}
    assert coordinator["license"] == sdk["license"]
    assert (COORDINATOR_DIST / coordinator["readme"]).is_file()


def test_the_coordinator_distribution_builds_from_the_package_itself() -> None:
    """packaging/coordinator/coordinator is a link to the package, never a copy that
    could drift from it."""
    link = COORDINATOR_DIST / "coordinator"
    assert link.is_symlink()
    assert link.resolve() == (ROOT / "coordinator").resolve()
    include = _pyproject(COORDINATOR_DIST)["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["coordinator*"]
