"""Issue 39's size rule, checked on the tree: no module of ``coordinator/`` over
``MAX_MODULE_LINES`` lines, and no function over ``MAX_FUNCTION_LINES`` lines in the
layers of the hot path (``dispatch``, ``service``, ``store``, ``app``). A module or a
function that grows past its bound fails here, named, rather than in a review."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
"""Lines from ``def`` to the function's last line, its docstring included and its
decorators not (``end_lineno - lineno + 1``)."""
FUNCTION_LAYERS = ("coordinator/dispatch", "coordinator/service", "coordinator/store", "coordinator/app")

MIGRATIONS = "coordinator/store/alembic/versions"
"""Left out of both checks: migrations are frozen history. A released revision is never
edited (databases migrated before and after the edit would differ), so the initial
schema's one long ``upgrade`` stays as it shipped; new code is what the rule shapes."""


def _modules(root: Path, under: str) -> Iterator[tuple[str, str]]:
    """``(path relative to root, source)`` of every module under ``under`` but the
    migrations."""
    for path in sorted((root / under).rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if not relative.startswith(MIGRATIONS + "/"):
            yield relative, path.read_text(encoding="utf-8")


def long_modules(root: Path) -> list[str]:
    """``path: N lines`` for every module of ``coordinator/`` over the bound."""
    return [
        f"{path}: {len(source.splitlines())} lines"
        for path, source in _modules(root, "coordinator")
        if len(source.splitlines()) > MAX_MODULE_LINES
    ]


def function_lengths(root: Path) -> dict[tuple[str, str], list[int]]:
    """Per ``(path, function name)`` in the hot-path layers, the length in lines of
    each function so named (methods and nested functions included)."""
    lengths: dict[tuple[str, str], list[int]] = {}
    for layer in FUNCTION_LAYERS:
        for path, source in _modules(root, layer):
            for node in ast.walk(ast.parse(source, filename=path)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    assert node.end_lineno is not None
                    lines = node.end_lineno - node.lineno + 1
                    lengths.setdefault((path, node.name), []).append(lines)
    return lengths


def long_functions(root: Path) -> list[str]:
    """``path: name (N lines)`` for every function over the bound."""
    return [
        f"{path}: {name} ({max(lines)} lines)"
        for (path, name), lines in sorted(function_lengths(root).items())
        if max(lines) > MAX_FUNCTION_LINES
    ]


def test_no_module_of_the_coordinator_is_over_500_lines() -> None:
    assert long_modules(ROOT) == [], f"split these modules by concern (at most {MAX_MODULE_LINES} lines)"


def test_no_function_of_the_hot_path_layers_is_over_60_lines() -> None:
    assert long_functions(ROOT) == [], (
        f"shorten these functions (at most {MAX_FUNCTION_LINES} lines) by naming their steps"
    )


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function ``lines`` long, its ``def`` line included."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(lines - 1))
    return f"{indent}def {name}() -> None:\n{body}"


def test_the_checks_name_what_breaks_the_rule(tmp_path: Path) -> None:
    """The scans themselves, on a made-up tree: a long module anywhere under
    ``coordinator/``, a long method in a hot-path layer, and what they leave alone (a
    long function outside those layers, a long migration, a function of exactly 60)."""
    files = {
        "coordinator/cli/big.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
        "coordinator/cli/fine.py": "x = 1\n" * MAX_MODULE_LINES,
        "coordinator/service/slow.py": "class Service:\n" + _function("run", 61, indent="    "),
        "coordinator/service/exact.py": _function("exact", 60),
        "coordinator/domain/pure.py": _function("long", 100),
        f"{MIGRATIONS}/0001_initial.py": _function("upgrade", 600),
    }
    for relative, source in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source, encoding="utf-8")

    assert long_modules(tmp_path) == [f"coordinator/cli/big.py: {MAX_MODULE_LINES + 1} lines"]
    assert long_functions(tmp_path) == ["coordinator/service/slow.py: run (61 lines)"]
