"""``Worker.start_in_background()``: a worker on its own thread and loop, for hosts with
no event loop, against the real coordinator (and, for interpreter exit and fork, in
processes of their own)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import Coordinator
from tests.support import ROOT
from worker_sdk import AsyncClient, JobContext, JobState, Worker, job


@job("tests.background.echo")
@dataclass
class Echo:
    text: str


@job("tests.background.hold")
@dataclass
class Hold:
    name: str


async def test_a_background_worker_runs_sync_and_async_handlers_and_stops_on_request(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    worker = Worker(coordinator.target, concurrency=2, heartbeat_interval=timedelta(milliseconds=200))
    threads: list[str] = []

    @worker.handler(Echo)
    def echo(payload: Echo, ctx: JobContext) -> bytes:  # sync: the worker's thread pool
        threads.append(threading.current_thread().name)
        return payload.text.upper().encode()

    handle = await asyncio.to_thread(worker.start_in_background)
    try:
        assert handle.running
        job_id = await client.enqueue(Echo("quiet"))
        info = await client.wait(job_id, timedelta(seconds=20))
    finally:
        stopped = await asyncio.to_thread(handle.stop, 10)

    assert (info.state, info.output) == (JobState.SUCCEEDED, b"QUIET")
    assert threads and threads[0].startswith("runwick-handler")
    assert stopped is True and not handle.running and not worker.connected
    assert await asyncio.to_thread(handle.stop, 1) is True  # again: nothing left to do


async def test_stop_drains_a_running_handler_before_it_returns(
    coordinator: Coordinator, client: AsyncClient
) -> None:
    worker = Worker(coordinator.target, concurrency=1, drain_timeout=timedelta(seconds=20))
    started, release = threading.Event(), threading.Event()

    @worker.handler(Hold)
    def hold(payload: Hold, ctx: JobContext) -> bytes:
        started.set()
        release.wait(20)
        return b"finished"

    handle = await asyncio.to_thread(worker.start_in_background)
    job_id = await client.enqueue(Hold("drain me"))
    assert await asyncio.to_thread(started.wait, 20)
    stopping = asyncio.create_task(asyncio.to_thread(handle.stop, 30))
    await asyncio.sleep(0.2)
    assert not stopping.done()  # still draining: the handler has not returned
    release.set()
    assert await stopping is True
    info = await client.get(job_id)
    assert (info.state, info.output) == (JobState.SUCCEEDED, b"finished")


def test_start_in_background_refuses_a_worker_without_handlers() -> None:
    worker = Worker("127.0.0.1:1")
    with pytest.raises(RuntimeError, match="register at least one handler"):
        worker.start_in_background()


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "host.py"
    path.write_text(textwrap.dedent(body))
    return path


async def _run(path: Path, target: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(path), target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


HOST_PREAMBLE = """
    import sys, threading
    from dataclasses import dataclass
    from datetime import timedelta
    from worker_sdk import Client, JobContext, Worker, job

    @job("tests.background.hold")
    @dataclass
    class Hold:
        name: str

    target = sys.argv[1]
    started = threading.Event()
    worker = Worker(target, concurrency=1, drain_timeout=timedelta(seconds=20))

    @worker.handler(Hold)
    def hold(payload, ctx: JobContext) -> bytes:
        started.set()
        threading.Event().wait(0.5)  # still running when the host exits
        return b"drained at exit"
"""


async def test_a_host_that_exits_drains_its_background_worker(
    coordinator: Coordinator, client: AsyncClient, tmp_path: Path
) -> None:
    """No stop() call at all: the host's main thread ends, the interpreter exits, and
    the running handler still finishes and its result is recorded."""
    job_id = await client.enqueue(Hold("exit"))
    script = _script(
        tmp_path,
        HOST_PREAMBLE
        + """
    worker.start_in_background()
    assert started.wait(20)
    print("main thread ends", flush=True)
    """,
    )
    done = await _run(script, coordinator.target)
    assert done.returncode == 0, done.stdout + done.stderr
    info = await client.get(job_id)
    assert (info.state, info.output) == (JobState.SUCCEEDED, b"drained at exit")


async def test_a_handle_refuses_to_stop_in_another_process(
    coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in a child forked after the start (a real fork of a process with gRPC threads
    is what the rule forbids, so the child's process ID is faked here)."""
    import worker_sdk._background as background

    worker = Worker(coordinator.target)

    @worker.handler(Echo)
    def echo(payload: Echo, ctx: JobContext) -> bytes:
        return b""

    handle = await asyncio.to_thread(worker.start_in_background)
    real_pid = background.os.getpid()
    monkeypatch.setattr(background.os, "getpid", lambda: real_pid + 1)
    with pytest.raises(RuntimeError, match="start it after the fork"):
        handle.stop(1)
    assert handle.running
    monkeypatch.undo()
    assert await asyncio.to_thread(handle.stop, 10) is True


def test_a_process_forked_from_the_declaring_one_takes_its_own_worker_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pre-fork servers declare the worker in the master (preload) and start it in each
    child: two children must not share the master's ID. One given explicitly stays."""
    import worker_sdk._worker as worker_module

    made, named = Worker("127.0.0.1:1"), Worker("127.0.0.1:1", worker_id="billing-1")
    in_master = made.worker_id
    real_pid = worker_module.os.getpid()
    monkeypatch.setattr(worker_module.os, "getpid", lambda: real_pid + 1)
    in_child = made.worker_id
    assert in_child != in_master and made.worker_id == in_child  # made once per process
    assert named.worker_id == "billing-1"
