"""Every ```python block of README.md and docs/*.md runs, or says why it does not.

Each page's blocks run in order in one namespace, as a reader would paste them into one
session, against a real coordinator on port 0 (SQLite, authentication on). The runner
injects only this (docs/index.md, "Contributing to the docs"):

- ``127.0.0.1:7233``, the pages' local address, is replaced by the test coordinator's;
- ``RUNWICK_TOKEN`` in the environment and ``token`` in the namespace hold an admin token;
- the namespace is a module importable as ``myapp.jobs``, the module the pages' worker
  examples live in, so ``from myapp.jobs import CapturePayment`` works in a later block;
- the ``Worker`` objects in the namespace are started in the background
  (``start_in_background``) before the first block that uses a client (``client.``), so
  its jobs run; all are stopped at the end.

A block that raises fails its page's test, naming the page and line. A block that cannot
run here (certificates, a host framework) is marked with ``<!-- snippet: skip (why) -->``
on the line before its fence.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.process import RunningCoordinator, start_coordinator
from tests.support.snippets import DEFAULT_TARGET, Snippet, documentation_pages, snippets_of
from worker_sdk import BackgroundWorker, Worker

APP_PACKAGE, APP_MODULE = "myapp", "myapp.jobs"
PAGES = [page for page in documentation_pages() if snippets_of(page)]


@pytest.fixture
async def documented_coordinator(tmp_path: Path) -> AsyncIterator[RunningCoordinator]:
    config = CoordinatorConfig(
        database_url=f"sqlite:///{tmp_path / 'snippets.db'}", port=0, auth_enabled=True, drain_timeout_s=2
    )
    running = await start_coordinator(config)
    yield running
    await running.stop(grace_s=1)


def run_snippets(snippets: list[Snippet], target: str, token: str) -> list[Snippet]:
    """Runs the unskipped blocks in order in one namespace; returns those that ran.

    Raises AssertionError naming the block that failed, with its traceback."""
    # A module registered while the blocks run: dataclasses (``@job``) look their class's
    # module up in sys.modules, and later blocks import from it as a reader would.
    package, module = types.ModuleType(APP_PACKAGE), types.ModuleType(APP_MODULE)
    package.__path__ = []
    package.jobs = module  # type: ignore[attr-defined]
    sys.modules.update({APP_PACKAGE: package, APP_MODULE: module})
    namespace: dict[str, Any] = module.__dict__
    namespace["token"] = token
    started: dict[int, BackgroundWorker] = {}
    ran: list[Snippet] = []
    previous = os.environ.get("RUNWICK_TOKEN")
    os.environ["RUNWICK_TOKEN"] = token
    try:
        for snippet in snippets:
            if snippet.skip_reason is not None:
                continue
            if "client." in snippet.code:
                for value in list(namespace.values()):
                    if isinstance(value, Worker) and id(value) not in started:
                        started[id(value)] = value.start_in_background()
            code = compile(
                snippet.code.replace(DEFAULT_TARGET, target), f"{snippet.page}:{snippet.line}", "exec"
            )
            try:
                exec(code, namespace)  # the documentation's own examples
            except BaseException as error:
                detail = "".join(traceback.format_exception(error))
                raise AssertionError(
                    f"the python block at {snippet.page}:{snippet.line} failed; fix it, or mark it "
                    f"<!-- snippet: skip (why) -->:\n{detail}"
                ) from error
            ran.append(snippet)
    finally:
        for handle in started.values():
            handle.stop(5)
        del sys.modules[APP_MODULE], sys.modules[APP_PACKAGE]
        if previous is None:
            os.environ.pop("RUNWICK_TOKEN", None)
        else:
            os.environ["RUNWICK_TOKEN"] = previous
    return ran


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
async def test_every_python_block_of_the_page_runs(
    page: Path, documented_coordinator: RunningCoordinator
) -> None:
    token = documented_coordinator.bootstrap_token
    assert token is not None
    snippets = snippets_of(page)
    ran = await asyncio.to_thread(run_snippets, snippets, documented_coordinator.target, token)
    assert [s for s in snippets if s.skip_reason is None] == ran


async def test_a_block_that_fails_fails_the_page(
    tmp_path: Path, documented_coordinator: RunningCoordinator
) -> None:
    """The runner is real: a broken block is reported with its page and line."""
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "broken.md"
    page.write_text("Text.\n\n```python\nfrom worker_sdk import Client\nclient.enqueue(Missing())\n```\n")
    token = documented_coordinator.bootstrap_token
    assert token is not None
    with pytest.raises(AssertionError, match=r"docs/broken.md:3 failed"):
        await asyncio.to_thread(
            run_snippets, snippets_of(page, tmp_path), documented_coordinator.target, token
        )
