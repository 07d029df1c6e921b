"""The embedding examples (examples/), each run as its host runs it, against a real
coordinator: a FastAPI app under uvicorn (lifespan), a plain WSGI app under gunicorn's
pre-fork workers (the worker started after the fork), and a Django project (its
management command, and its ready hook under gunicorn)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import Coordinator
from tests.support import ROOT, eventually_async, free_port, read_log, reap, start_process, wait_for_line
from worker_sdk import AsyncClient, JobState

pytestmark = pytest.mark.slow

EXAMPLES = ROOT / "examples"


def _start(command: list[str], folder: Path, log: Path, target: str, **env: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "RUNWICK_TARGET": target, "PYTHONPATH": f"{folder}:{ROOT}", **env}
    environment.pop("RUNWICK_TOKEN", None)
    with log.open("a") as log_file:
        return subprocess.Popen(
            command, cwd=folder, env=environment, stdout=log_file, stderr=subprocess.STDOUT, text=True
        )


async def _post(url: str) -> dict[str, object]:
    def call() -> dict[str, object]:
        request = urllib.request.Request(url, method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=20) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    return await asyncio.to_thread(call)


async def _stop(process: subprocess.Popen[str], log: Path, *, resignals: bool = False) -> None:
    """SIGTERM, then a clean exit: 0, or (``resignals``: uvicorn, after its graceful
    shutdown, ends by the signal it got, as the convention asks) -SIGTERM."""
    process.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(process.wait, 60)
    assert code in ((0, -signal.SIGTERM) if resignals else (0,)), read_log(log)


async def _workers(coordinator: Coordinator, count: int) -> None:
    async def connected() -> bool:
        return len(coordinator.connected_workers()) == count

    await eventually_async(connected, timeout=30, interval=0.1)


async def test_fastapi_lifespan_runs_the_worker_in_the_app_loop(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "uvicorn.log"
    command = [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)]
    process = _start(command, EXAMPLES / "fastapi", log, coordinator.target)
    try:
        await wait_for_line(process, log, "Application startup complete")
        await _workers(coordinator, 1)
        answer = await _post(f"http://127.0.0.1:{port}/thumbnails/cat.png")
        info = await client.wait(str(answer["job_id"]), timedelta(seconds=30))
        assert info.state is JobState.SUCCEEDED
        assert info.output == f"thumbnail of cat.png made by process {process.pid}".encode()
        await _stop(process, log, resignals=True)
        assert "Application shutdown complete" in read_log(log)
        await _workers(coordinator, 0)
    finally:
        reap(process)


async def test_gunicorn_prefork_workers_each_run_a_worker_started_after_the_fork(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "gunicorn.log"
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-b", f"127.0.0.1:{port}"]
    process = _start([*command, "app:application"], EXAMPLES / "wsgi", log, coordinator.target)
    try:
        await _workers(coordinator, 2)  # one stream per gunicorn worker process (preload_app)
        await wait_for_line(process, log, "runwick worker", count=2)
        answers = [await _post(f"http://127.0.0.1:{port}/resize?image=img-{n}") for n in range(6)]
        pids = set()
        for answer in answers:
            info = await client.wait(str(answer["job_id"]), timedelta(seconds=30))
            assert info.state is JobState.SUCCEEDED and info.output is not None
            pids.add(int(info.output.split()[-1]))
        assert process.pid not in pids  # never the master: it has no worker
        await _stop(process, log)
        drained = [line for line in read_log(log).splitlines() if "runwick worker drained in pid" in line]
        assert len(drained) == 2 and all(line.endswith("True") for line in drained)
        await _workers(coordinator, 0)
    finally:
        reap(process)


async def test_django_management_command_runs_the_worker(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    log = tmp_path / "django-worker.log"
    command = [sys.executable, "manage.py", "runwick_worker"]
    process = _start(command, EXAMPLES / "django", log, coordinator.target)
    try:
        await _workers(coordinator, 1)
        made = await client.enqueue_raw("examples.django.send_receipt", b'{"order_id": "o-1"}')
        info = await client.wait(made.id, timedelta(seconds=30))
        assert info.state is JobState.SUCCEEDED
        assert info.output == f"receipt for order o-1 sent by process {process.pid}".encode()
        await _stop(process, log)
        await _workers(coordinator, 0)
    finally:
        reap(process)


async def test_django_ready_hook_starts_the_worker_in_each_gunicorn_process(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "django-gunicorn.log"
    command = [sys.executable, "-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "shop.wsgi"]
    process = _start(command, EXAMPLES / "django", log, coordinator.target, RUNWICK_WORKER_IN_PROCESS="1")
    try:
        await _workers(coordinator, 1)
        answer = await _post(f"http://127.0.0.1:{port}/orders/o-2")
        info = await client.wait(str(answer["job_id"]), timedelta(seconds=30))
        assert info.state is JobState.SUCCEEDED
        assert info.output == f"receipt for order o-2 sent by process {answer['pid']}".encode()
        assert answer["pid"] != process.pid  # the gunicorn worker, after the fork
        await _stop(process, log)
        await _workers(coordinator, 0)
    finally:
        reap(process)


def test_the_examples_folder_names_each_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for folder in ("fastapi", "wsgi", "django"):
        assert f"{folder}/" in readme
    assert start_process  # the shared helpers start every other process of the suite
