"""Browser tests of the dashboard: Debian's Chromium (``/usr/bin/chromium``, installed
by tests/run.sh) driven by Playwright's Python package, against a real ``runwick serve``
process (SQLite, ports chosen by the system) and a real worker process, one of each per
module. Playwright never downloads a browser here.

Each test gets a fresh browser context (no cookies) and signs in through the form.
Screenshots of every view go to the module's temporary directory (``shots``).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, Playwright, expect, sync_playwright

from tests.support import (
    LISTENING,
    WorkerProcess,
    read_log,
    reap,
    runwick_command,
    start_process,
    start_worker,
)
from worker_sdk import Client

CHROMIUM = "/usr/bin/chromium"
WORKER_APP = "tests.integration.worker_app:worker"
START_TIMEOUT_S = 30.0
expect.set_options(timeout=20_000)  # a wait for what the page shows, not a timed assertion


@dataclass
class Dashboard:
    """A running coordinator with its dashboard, a worker, and tokens of each kind."""

    url: str
    target: str
    admin_token: str
    log: Path
    shots: Path
    tokens: dict[str, str] = field(default_factory=dict)
    """Secrets by name: ``read``, ``manage`` (read, manage), ``reveal`` (read, reveal)."""
    token_ids: dict[str, str] = field(default_factory=dict)

    def client(self) -> Client:
        return Client(self.target, token=self.admin_token)


def _wait_line(process: subprocess.Popen[str], log: Path, pattern: str) -> re.Match[str]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        match = re.search(pattern, read_log(log))
        if match:
            return match
        if process.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"runwick serve did not print {pattern!r}:\n{read_log(log)[-3000:]}")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    folder = tmp_path_factory.mktemp("dashboard")
    log = folder / "serve.log"
    token_file = folder / "admin-token"
    process = start_process(
        runwick_command(
            "serve",
            "--database-url",
            f"sqlite:///{folder / 'runwick.db'}",
            "--port",
            "0",
            "--dashboard-port",
            "0",
            "--health-port",
            "-1",
            "--metrics-port",
            "-1",
            "--maintenance-interval",
            "0.2",
            "--admin-token-file",
            str(token_file),
        ),
        log,
    )
    worker: WorkerProcess | None = None
    try:
        target = _wait_line(process, log, re.escape(LISTENING) + r"(\S+)").group(1)
        port = _wait_line(process, log, r"dashboard port (\d+)").group(1)
        state = Dashboard(
            f"http://127.0.0.1:{port}",
            target,
            token_file.read_text().strip(),
            log,
            folder / "shots",
        )
        state.shots.mkdir()
        with state.client() as client:
            for name, scopes in {
                "read": ["read"],
                "manage": ["read", "manage"],
                "reveal": ["read", "reveal"],
                "work": ["work"],
            }.items():
                created = client.create_token(f"browser-{name}", scopes)
                state.tokens[name] = created.secret
                state.token_ids[name] = created.token.id
        worker = start_worker(
            WORKER_APP,
            target,
            folder / "worker.log",
            runwick_token=state.tokens["work"],
            test_concurrency=4,
        )
        yield state
    finally:
        if worker is not None:
            reap(worker.process)
        reap(process)


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: tests/run.sh installs Debian's chromium")
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
    yield launched
    launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(20_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    yield opened
    context.close()
    # A CSP violation (an inline script or style) shows as a console error.
    assert [e for e in errors if "Content Security Policy" in e] == []
