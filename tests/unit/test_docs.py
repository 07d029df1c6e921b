"""The project's documentation (docs/, mkdocs.yml) builds, stands alone and stays true:
``mkdocs build --strict``; the CLI reference is what the parser says; every rule number
the repository cites is defined in docs/rules.md; the metric and scope references match
the code; nothing points outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from coordinator.api.auth import METHOD_SCOPES
from coordinator.metrics import CoordinatorMetrics
from tests.support import ROOT
from tests.support.snippets import SnippetMarkerError, documentation_pages, snippets_of
from worker_sdk._metrics import WorkerMetrics
from worker_sdk.outbox._metrics import RelayMetrics

DOCS = ROOT / "docs"


def _repository_files() -> list[Path]:
    """Tracked files and new ones not ignored: what a commit of the work tree would hold."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary files


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """Any warning (a broken link or anchor, a page missing from the nav) fails the build."""
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, build.stdout + build.stderr
    pages = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for page in ("concepts", "retries", "limits", "rules", "protocol", "security", "kubernetes"):
        assert f"{page}/index.html" in pages
    for page in ("sdk", "workflows", "queues", "schedules", "retention", "api"):
        assert f"{page}/index.html" in pages
    api = (site / "api" / "index.html").read_text()
    assert 'id="worker_sdk.Worker"' in api and 'id="worker_sdk.Client.create_schedule"' in api
    assert {"metrics/index.html", "cli/index.html"} <= pages
    assert "runwick jobs list" in (site / "cli" / "index.html").read_text()
    assert not list(site.rglob("*.py")), "the generator is not part of the site"


def test_the_cli_reference_is_what_the_parser_says() -> None:
    """docs/cli.md is generated (``python docs/cli_reference.py``); run with a token and a
    target in the environment, which must neither change the page nor leak into it."""
    environment = {**os.environ, "RUNWICK_TOKEN": "rwk_leak_secret", "RUNWICK_TARGET": "elsewhere:1"}
    check = subprocess.run(
        [sys.executable, str(DOCS / "cli_reference.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )
    assert check.returncode == 0, check.stderr
    page = (DOCS / "cli.md").read_text()
    assert "rwk_leak_secret" not in page
    assert "elsewhere:1" not in page


def test_the_cli_reference_names_every_command_and_flag() -> None:
    import argparse

    from coordinator.cli import build_parser

    page = (DOCS / "cli.md").read_text()
    # The first cell of each argument row: `--state STATE`, `-y, --yes`.
    documented = {
        word.split(" ")[0]
        for cell in re.findall(r"^\| `([^`]+)` \|", page, re.MULTILINE)
        for word in cell.split(", ")
    }

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        assert f"`{command}`" in page, command
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{command} {name}")
            elif action.help is not argparse.SUPPRESS:
                for flag in action.option_strings:
                    if flag not in ("-h", "--help"):
                        assert flag in documented, f"{command} {flag}"

    walk(build_parser(), "runwick")


def test_the_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    """The drift check is real: a page that differs from the parser's is refused."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", DOCS / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stale = tmp_path / "cli.md"
    stale.write_text((DOCS / "cli.md").read_text().replace("`--limit", "`--lim", 1))
    module.PAGE = stale
    sys_argv = sys.argv
    sys.argv = ["cli_reference.py", "--check"]
    try:
        assert module.main() == 1
    finally:
        sys.argv = sys_argv
    assert "`--lim " in stale.read_text(), "--check must not rewrite the page"


def test_every_rule_number_cited_is_defined() -> None:
    """Code comments, tests and docs cite rules as R-n: each must be one docs/rules.md defines."""
    defined = {int(n) for n in re.findall(r"\{#r-(\d+)\}", (DOCS / "rules.md").read_text())}
    assert defined == set(range(1, 23))
    cited: dict[int, set[str]] = defaultdict(set)
    for path in _repository_files():
        text = _text(path)
        if text is None or path.suffix not in (".py", ".md", ".proto", ".yml", ".yaml", ".toml", ".js"):
            continue
        for number in re.findall(r"\bR-(\d+)\b", text):
            cited[int(number)].add(path.relative_to(ROOT).as_posix())
    undefined = {n: sorted(files)[:3] for n, files in cited.items() if n not in defined}
    assert undefined == {}


def test_nothing_points_outside_the_repository() -> None:
    """The repository stands alone: no path to a folder beside it, no private product
    documents by name. (The patterns are split so this file does not match itself.)"""
    forbidden = re.compile(
        "|".join(
            [
                re.escape(".." + "/shared"),
                re.escape("/work" + "/shared"),
                re.escape("SP" + "EC.md"),
                re.escape("STY" + "LE.md"),
                r"\b" + "SP" + r"EC\b",
                r"\b" + "STY" + r"LE \d",
            ]
        )
    )
    found = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if forbidden.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert found == []


def _documented_metrics() -> set[str]:
    return set(re.findall(r"^\| `(runwick_[a-z_]+)` \|", (DOCS / "metrics.md").read_text(), re.MULTILINE))


def _registered(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        if family.name.startswith("runwick_"):
            suffix = "_total" if family.type == "counter" else ""
            names.add(family.name + suffix)
    return names


def test_the_metric_reference_lists_every_metric_and_no_other() -> None:
    coordinator = _registered(CoordinatorMetrics().registry)
    worker_registry = CollectorRegistry()
    WorkerMetrics(worker_registry)
    sdk = _registered(worker_registry)
    relay_registry = CollectorRegistry()
    RelayMetrics(relay_registry)
    relay = _registered(relay_registry)
    assert coordinator and sdk and relay
    assert _documented_metrics() == coordinator | sdk | relay


@pytest.mark.parametrize("page", ["security.md"])
def test_the_scope_table_matches_the_scope_of_every_rpc(page: str) -> None:
    """R-21: the table in docs/security.md says what METHOD_SCOPES enforces."""
    expected: dict[str, set[str]] = defaultdict(set)
    for method, scope in METHOD_SCOPES.items():
        expected[scope.value].add(method.rsplit("/", 1)[1])
    documented: dict[str, set[str]] = {}
    for scope, rpcs in re.findall(r"^\| `([a-z]+)` \| (.+) \|$", (DOCS / page).read_text(), re.MULTILINE):
        documented[scope] = {name.rsplit(".", 1)[-1] for name in re.findall(r"`([A-Za-z.]+)`", rpcs)}
    assert documented == dict(expected)


def test_the_api_reference_names_every_public_name_of_the_sdk() -> None:
    """docs/api.md renders the docstrings of what ``from worker_sdk import ...`` offers:
    a name added to ``__all__`` without a ``::: worker_sdk.Name`` line fails here."""
    import worker_sdk

    rendered = set(re.findall(r"^::: worker_sdk\.(\w+)$", (DOCS / "api.md").read_text(), re.MULTILINE))
    assert set(worker_sdk.__all__) - rendered == set()
    assert "testing" in rendered


def test_every_python_block_of_the_docs_runs_or_says_why_not() -> None:
    """The snippet runner (tests/integration/test_doc_snippets.py) runs each block a page
    does not mark ``<!-- snippet: skip (why) -->``; a marker must give its reason."""
    pages = documentation_pages()
    assert ROOT / "README.md" in pages and DOCS / "sdk.md" in pages
    blocks = [snippet for page in pages for snippet in snippets_of(page)]
    assert len([b for b in blocks if b.skip_reason is None]) >= 15
    assert all(b.skip_reason for b in blocks if b.skip_reason is not None)


def test_a_skip_marker_needs_a_reason_and_applies_to_the_next_block(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "<!-- snippet: skip (needs certificates) -->\n```python\nskipped()\n```\n\n```python\nrun()\n```\n"
    )
    first, second = snippets_of(page, tmp_path)
    assert (first.skip_reason, first.code, first.line) == ("needs certificates", "skipped()\n", 2)
    assert (second.skip_reason, second.code) == (None, "run()\n")
    page.write_text("<!-- snippet: skip -->\n```python\nskipped()\n```\n")
    with pytest.raises(SnippetMarkerError, match="say why"):
        snippets_of(page, tmp_path)
    page.write_text("```python\nnever_closed()\n")
    with pytest.raises(SnippetMarkerError, match="never closed"):
        snippets_of(page, tmp_path)


def test_every_public_name_and_method_of_the_sdk_has_a_docstring() -> None:
    """The API reference shows each entry's docstring: none may be empty (inherited
    methods included, as ``Client`` shows its queue, schedule and admin calls)."""
    import griffe

    import worker_sdk

    package = griffe.load("worker_sdk", search_paths=[str(ROOT)], resolve_aliases=True)
    undocumented = []
    for name in worker_sdk.__all__:
        declared = package[name]
        if not declared.docstring:
            undocumented.append(name)
        if not declared.is_class:
            continue
        for member_name, member in declared.all_members.items():
            documentable = member.is_function or (member.is_attribute and "property" in member.labels)
            if not member_name.startswith("_") and documentable and not member.docstring:
                undocumented.append(f"{name}.{member_name}")
    assert undocumented == []
