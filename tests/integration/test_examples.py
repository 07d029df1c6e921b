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
from tests.support import (
    ROOT,
    UVICORN_LISTENING,
    eventually_async,
    free_port,
    read_log,
    reap,
    start_process,
    wait_for_line,
)
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
    database = f"sqlite:///{tmp_path / 'shop.db'}"  # the app's own, for its outbox
    process = _start(command, EXAMPLES / "fastapi", log, coordinator.target, APP_DATABASE_URL=database)
    try:
        await wait_for_line(process, log, UVICORN_LISTENING)
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


async def _job_by_key(client: AsyncClient, wire_name: str, key: str) -> str:
    async def found() -> str | None:
        async for job in client.list_jobs(wire_name=wire_name):
            if job.idempotency_key == key:
                return job.id
        return None

    return await eventually_async(found, timeout=30, interval=0.1)


async def test_fastapi_orders_are_enqueued_through_the_outbox_in_their_transaction(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    port, log = free_port(), tmp_path / "uvicorn.log"
    command = [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", str(port)]
    database = f"sqlite:///{tmp_path / 'shop.db'}"
    process = _start(command, EXAMPLES / "fastapi", log, coordinator.target, APP_DATABASE_URL=database)
    try:
        await wait_for_line(process, log, UVICORN_LISTENING)
        answer = await _post(f"http://127.0.0.1:{port}/orders/o-7")
        job_id = await _job_by_key(client, "examples.fastapi.receipt", str(answer["idempotency_key"]))
        info = await client.wait(job_id, timedelta(seconds=30))
        assert (info.state, info.output) == (JobState.SUCCEEDED, b"receipt for order o-7")
        await _stop(process, log, resignals=True)
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


async def test_django_orders_are_enqueued_through_the_outbox_and_the_relay_command(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    folder, database = EXAMPLES / "django", tmp_path / "shop.db"
    migrate = _start(
        [sys.executable, "manage.py", "migrate"],
        folder,
        tmp_path / "migrate.log",
        coordinator.target,
        SHOP_DATABASE=str(database),
    )
    assert await asyncio.to_thread(migrate.wait, 60) == 0, read_log(tmp_path / "migrate.log")
    port, log = free_port(), tmp_path / "django-gunicorn.log"
    web = [sys.executable, "-m", "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "shop.wsgi"]
    env = {"RUNWICK_WORKER_IN_PROCESS": "1", "SHOP_DATABASE": str(database)}
    process = _start(web, folder, log, coordinator.target, **env)
    relay_command = [
        sys.executable,
        "-m",
        "coordinator.cli",
        "outbox",
        "relay",
        "--database-url",
        f"sqlite:///{database}",
    ]
    relay = _start(
        [*relay_command, "--target", coordinator.target, "--poll-interval", "0.1"],
        folder,
        tmp_path / "relay.log",
        coordinator.target,
    )
    try:
        await _workers(coordinator, 1)
        answer = await _post(f"http://127.0.0.1:{port}/orders/o-9/atomic")
        job_id = await _job_by_key(client, "examples.django.send_receipt", str(answer["idempotency_key"]))
        info = await client.wait(job_id, timedelta(seconds=30))
        assert info.state is JobState.SUCCEEDED
        assert info.output == f"receipt for order o-9 sent by process {answer['pid']}".encode()
        await _stop(relay, tmp_path / "relay.log")
        await _stop(process, log)
    finally:
        reap(relay)
        reap(process)


def test_the_examples_folder_names_each_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for folder in ("fastapi", "wsgi", "django"):
        assert f"{folder}/" in readme
    assert start_process  # the shared helpers start every other process of the suite
