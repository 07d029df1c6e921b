"""Handlers that report progress, run by real worker processes (``test_progress``).

Started with ``runwick worker tests.integration.progress_app:worker``. A stepping
handler reports step N once the file ``go-N`` exists in its directory and then writes
``reported-N``, so a test moves it one step at a time.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from worker_sdk import JobContext, Worker, job

worker = Worker(
    os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233"),
    queues=["default"],
    concurrency=2,
    lease=timedelta(milliseconds=int(os.environ.get("TEST_LEASE_MS", "60000"))),
    heartbeat_interval=timedelta(milliseconds=int(os.environ.get("TEST_HEARTBEAT_MS", "100"))),
    drain_timeout=timedelta(seconds=2),
)


@job("tests.progress_steps")
@dataclass
class ProgressSteps:
    directory: str
    steps: int


@job("tests.progress_steps_sync")
@dataclass
class ProgressStepsSync:
    directory: str
    steps: int


@job("tests.progress_burst")
@dataclass
class ProgressBurst:
    """Reports 1..reports as fast as it can, then waits for ``release``."""

    directory: str
    reports: int


@job("tests.progress_bad")
@dataclass
class ProgressBad:
    """Makes malformed reports and returns what each raised."""

    note: str = ""


async def _exists(path: Path) -> None:
    """Returns once the test made ``path`` (another process: nothing to wait on but the file)."""
    while not path.exists():  # noqa: ASYNC110
        await asyncio.sleep(0.02)


def _step_message(step: int) -> str:
    return f"resizing images, step {step}"


@worker.handler(ProgressSteps)
async def progress_steps(payload: ProgressSteps, ctx: JobContext) -> bytes:
    directory = Path(payload.directory)
    for step in range(1, payload.steps + 1):
        await _exists(directory / f"go-{step}")
        ctx.report_progress(step, payload.steps, _step_message(step))
        (directory / f"reported-{step}").write_text("")
    await _exists(directory / "finish")
    return b"done"


@worker.handler(ProgressStepsSync)
def progress_steps_sync(payload: ProgressStepsSync, ctx: JobContext) -> bytes:
    directory = Path(payload.directory)
    for step in range(1, payload.steps + 1):
        while not (directory / f"go-{step}").exists():
            time.sleep(0.02)
        ctx.report_progress(step, payload.steps, _step_message(step))
        (directory / f"reported-{step}").write_text("")
    while not (directory / "finish").exists():
        time.sleep(0.02)
    return b"done"


@worker.handler(ProgressBurst)
async def progress_burst(payload: ProgressBurst, ctx: JobContext) -> bytes:
    directory = Path(payload.directory)
    for n in range(1, payload.reports + 1):
        ctx.report_progress(n, payload.reports, f"item {n}")
    (directory / "reported").write_text("")
    await _exists(directory / "release")
    return b"done"


@worker.handler(ProgressBad)
async def progress_bad(payload: ProgressBad, ctx: JobContext) -> bytes:
    attempts: list[tuple[object, object, object]] = [
        (-1, None, None),
        (math.nan, None, None),
        (1, math.inf, None),
        ("3", None, None),
        (True, None, None),
        (1, 2, "x" * 257),
    ]
    raised = []
    for done, total, message in attempts:
        try:
            ctx.report_progress(done, total, message)  # type: ignore[arg-type]
        except ValueError as exc:
            raised.append(str(exc))
    await asyncio.sleep(0.5)  # several heartbeats: had anything been kept, it would go out
    return json.dumps({"raised": raised, "kept": ctx.progress is not None}).encode()
