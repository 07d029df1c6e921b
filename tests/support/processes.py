"""Real processes for tests: ``runwick serve`` and ``runwick worker``, other programs,
waiting for what they print, stopping them, and probing the ports they open.

Every process writes stdout and stderr to a log file the test names, so a failure can
show what the process said. Waits never block a test's event loop (which may be running
an in-process coordinator the process talks to).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support.polling import eventually

ROOT = Path(__file__).resolve().parents[2]
"""The repository: the working directory of every process started here."""
LISTENING = "runwick coordinator listening on "
"""What ``runwick serve`` prints, followed by its target, once it accepts calls."""
STOP_GRACE_S = 30.0
NO_FIXED_PORTS = ("--health-port", "-1", "--metrics-port", "-1", "--dashboard-port", "-1")
"""``serve`` flags for a test coordinator: no health, metrics or dashboard port, whose
fixed defaults a second coordinator on the machine would find taken."""
"""How long a process may take to exit after SIGTERM before it is killed."""


def tool(name: str) -> str:
    """The path of an installed program; fails (never skips) the test when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: tests/run.sh installs it (Debian packages)")
    return path


def free_port() -> int:
    """A loopback port free right now, for a process that must be told its port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def runwick_command(*args: str) -> list[str]:
    """The ``runwick`` command line, run by this interpreter from the repository."""
    return [sys.executable, "-m", "coordinator.cli", *args]


def start_process(
    command: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """Starts ``command`` in the repository, stdout and stderr appended to ``log``."""
    with log.open("a") as log_file:  # the child keeps its own descriptor
        return subprocess.Popen(
            list(command), cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True
        )


def serve(log: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Starts ``runwick serve ARGS``; ``await wait_listening(...)`` before calling it."""
    return start_process(runwick_command("serve", *args), log, env=env)


UVICORN_LISTENING = "Uvicorn running on"
"""The line uvicorn prints once its socket listens. Not "Application startup complete":
uvicorn prints that after the app's lifespan starts and before it binds the port, so a
request sent on it was sometimes refused (seen in CI on the outbox FastAPI example)."""


async def wait_for_line(
    process: subprocess.Popen[str], log: Path, text: str, *, count: int = 1, timeout: float = 30.0
) -> str:
    """The ``count``-th line of ``log`` containing ``text``, once the process printed it.

    Raises:
        AssertionError: The process exited first, or the line did not come within
            ``timeout`` seconds; the message ends with the log's tail.
    """

    def printed() -> str | None:
        exited = process.poll() is not None  # before reading: what it printed is in the log
        lines = [line for line in read_log(log).splitlines() if text in line]
        if len(lines) >= count:
            return lines[count - 1]
        if exited:
            raise AssertionError(
                f"{_name(process)} exited with {process.returncode} before printing {text!r}"
            )
        return None

    try:
        return await eventually(printed, timeout, what=f"{_name(process)} to print {text!r} ({count}x)")
    except AssertionError as error:
        raise AssertionError(f"{error}{_tail(log)}") from None


async def wait_listening(
    process: subprocess.Popen[str], log: Path, *, count: int = 1, timeout: float = 30.0
) -> str:
    """The target of a ``runwick serve`` once it listens (``count``: its n-th start
    into the same log)."""
    line = await wait_for_line(process, log, LISTENING, count=count, timeout=timeout)
    if line.startswith("{"):  # --log-format json: the line is an object naming the target
        return str(json.loads(line)["target"])
    return line.split()[-1]


async def wait_exit(process: subprocess.Popen[str], timeout: float) -> int:
    """The exit code, once the process exits by itself within ``timeout`` seconds."""
    try:
        return await asyncio.to_thread(process.wait, timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{_name(process)} still running after {timeout:g} s") from None


async def stop(process: subprocess.Popen[str], grace_s: float = STOP_GRACE_S) -> int:
    """SIGTERM, then the exit code; a process still running after ``grace_s`` is killed
    (kill -9) and the test fails."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.to_thread(process.wait, grace_s)
    except subprocess.TimeoutExpired:
        await kill9(process)
        raise AssertionError(f"{_name(process)} did not exit within {grace_s:g} s of SIGTERM") from None


async def kill9(process: subprocess.Popen[str], timeout: float = 10.0) -> int:
    """``kill -9``, then waits for the process to be gone."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    return await asyncio.to_thread(process.wait, timeout)


def reap(process: subprocess.Popen[str]) -> None:
    """Teardown: kills the process if it still runs and collects it (blocking)."""
    if process.poll() is None:
        process.kill()
    process.wait(10)


def read_log(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def _tail(log: Path, chars: int = 3000) -> str:
    return f"\n--- {log} (last {chars} characters) ---\n{read_log(log)[-chars:]}"


def _name(process: subprocess.Popen[str]) -> str:
    args = process.args if isinstance(process.args, list) else [process.args]
    return f"process {process.pid} ({' '.join(map(str, args))[:160]})"


@dataclass
class WorkerProcess:
    """A ``runwick worker`` process and its log."""

    process: subprocess.Popen[str]
    log_path: Path

    async def kill9(self) -> None:
        await kill9(self.process)

    async def terminate(self) -> int:
        """SIGTERM (the worker drains), then its exit code."""
        return await stop(self.process)

    def log(self) -> str:
        return read_log(self.log_path)


def start_worker(app: str, target: str, log: Path, **settings: object) -> WorkerProcess:
    """Starts ``runwick worker APP`` against ``target``; each setting becomes an
    environment variable (``test_lease_ms=2000`` -> ``TEST_LEASE_MS=2000``)."""
    env = {**os.environ, "RUNWICK_TARGET": target, "PYTHONPATH": str(ROOT)}
    env.update({key.upper(): str(value) for key, value in settings.items()})
    process = start_process(runwick_command("worker", app, "--log-level", "DEBUG"), log, env=env)
    return WorkerProcess(process, log)


async def health_status(target: str | int, service: str = "") -> int:
    """The gRPC health status of ``service`` at ``target`` (a port: on 127.0.0.1)."""
    address = f"127.0.0.1:{target}" if isinstance(target, int) else target
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        return int(response.status)
