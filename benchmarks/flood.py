"""What one abusive worker stream costs everyone else: a real coordinator (``runwick
serve`` as a subprocess, authentication on) on SQLite and on PostgreSQL.

(a) **Heartbeat flood.** A ``work`` token restricted to its own queue opens one stream and
    sends heartbeats naming 10,000 made-up attempt IDs as fast as gRPC takes them, for
    ``--seconds``, from a process of its own. Meanwhile another tenant enqueues jobs at
    ``--rate`` per second and its worker runs them. Reported: the fraction of that
    tenant's jobs started by the end of the flood, the coordinator's RSS before, at its
    highest and after, and how long SIGTERM then takes to stop it while the flood goes on.
(b) **Wide Hello.** A stream says Hello with the most queues and wire names a Hello may
    name (``StreamBounds``) and all of its capacity in credit. Reported: another tenant's
    enqueue p50 (one job per call, its worker running them) before and while that stream
    is connected.

    python benchmarks/flood.py                       # both engines
    python benchmarks/flood.py --engine sqlite --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
from sqlalchemy import create_engine, text

from coordinator.domain.bounds import STREAM_BOUNDS
from coordinator.domain.ids import uuid7
from worker_sdk import AsyncClient
from worker_sdk.proto.runwick.v1 import job_pb2, worker_service_pb2_grpc
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

WIRE = "flood.noop"
PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DRAIN_TIMEOUT_S = 5


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def _database(engine: str, work_dir: Path) -> Iterator[str]:
    if engine == "sqlite":
        yield f"sqlite:///{work_dir / 'flood.db'}"
        return
    name = f"runwick_flood_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_SERVER, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Served:
    """``runwick serve`` on a free port; its admin token."""

    def __init__(self, database_url: str, work_dir: Path) -> None:
        self.port = _free_port()
        self.target = f"127.0.0.1:{self.port}"
        token_file = work_dir / "admin.token"
        runwick = [sys.executable, "-m", "coordinator.cli"]
        subprocess.run([*runwick, "migrate", "--database-url", database_url], check=True, capture_output=True)
        self.log = (work_dir / "serve.log").open("w")
        self.process = subprocess.Popen(
            [
                *runwick,
                "serve",
                "--database-url",
                database_url,
                "--port",
                str(self.port),
                "--admin-token-file",
                str(token_file),
                "--drain-timeout",
                str(DRAIN_TIMEOUT_S),
                # Any free port for each side service: the defaults may be another
                # coordinator's on a shared machine.
                *(
                    arg
                    for side in ("health", "dashboard", "metrics", "scaler")
                    for arg in (f"--{side}-port", "0")
                ),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not token_file.exists() or not token_file.read_text().strip():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"the coordinator did not start; see {work_dir / 'serve.log'}")
            time.sleep(0.1)
        self.admin_token = token_file.read_text().strip()

    def stop(self) -> float:
        """SIGTERM; returns the seconds until the process ended."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return float("inf")
        return time.monotonic() - began


class Tenant:
    """A worker that starts and finishes every job it is assigned, and counts them."""

    def __init__(self, target: str, token: str, queue: str, capacity: int = 64) -> None:
        self.channel = grpc.aio.insecure_channel(target)
        self.outgoing: asyncio.Queue[pb.ConnectRequest] = asyncio.Queue()
        self.started: set[str] = set()
        hello = pb.Hello(worker_id=f"tenant-{queue}", queues=[queue], wire_names=[WIRE], capacity=capacity)
        self.outgoing.put_nowait(pb.ConnectRequest(hello=hello))
        self.outgoing.put_nowait(pb.ConnectRequest(credit=pb.Credit(count=capacity)))
        stub = worker_service_pb2_grpc.WorkerServiceStub(self.channel)
        self.call = stub.Connect(self._requests(), metadata=(("authorization", f"Bearer {token}"),))
        self.task = asyncio.create_task(self._run())

    async def _requests(self) -> AsyncIterator[pb.ConnectRequest]:
        while True:
            yield await self.outgoing.get()

    async def _run(self) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
            async for message in self.call:
                kind = message.WhichOneof("kind")
                if kind == "assignment":
                    self.outgoing.put_nowait(
                        pb.ConnectRequest(start=pb.StartRequest(attempt_id=message.assignment.attempt_id))
                    )
                elif kind == "start_answer" and message.start_answer.granted:
                    self.started.add(message.start_answer.attempt_id)
                    result = pb.Result(
                        attempt_id=message.start_answer.attempt_id, outcome=job_pb2.OUTCOME_SUCCEEDED
                    )
                    self.outgoing.put_nowait(pb.ConnectRequest(result=result))
                    self.outgoing.put_nowait(pb.ConnectRequest(credit=pb.Credit(count=1)))

    async def close(self) -> None:
        self.call.cancel()
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.channel.close(None)


async def _tokens(served: Served, victim_queue: str, attacker_queue: str | None) -> tuple[str, str]:
    async with AsyncClient(served.target, token=served.admin_token) as admin:
        victim = await admin.create_token("victim", ["enqueue", "work", "read"], queues=[victim_queue])
        queues = [attacker_queue] if attacker_queue else []
        attacker = await admin.create_token("attacker", ["work"], queues=queues)
    return victim.secret, attacker.secret


async def heartbeat_flood(engine: str, seconds: float, rate: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder, _database(engine, Path(folder)) as url:
        served = Served(url, Path(folder))
        try:
            victim_token, attacker_token = await _tokens(served, "victim", "attacker")
            tenant = Tenant(served.target, victim_token, "victim")
            async with AsyncClient(served.target, token=victim_token) as client:
                await _enqueue_times(client, 20)  # warm-up
                quiet_ms = await _enqueue_times(client, 100)
            rss_before = _rss_mb(served.process.pid)
            started_before = len(tenant.started)
            attacker = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "--attack", served.target, attacker_token, str(seconds + 30)
            )
            await asyncio.sleep(0.5)  # the flood under way
            peak = rss_before
            enqueue_ms: list[float] = []
            async with AsyncClient(served.target, token=victim_token) as client:
                began = time.monotonic()
                while (elapsed := time.monotonic() - began) < seconds:
                    if len(enqueue_ms) < elapsed * rate:
                        enqueue_ms += await _enqueue_times(client, 1, settle_s=0)
                    else:
                        await asyncio.sleep(0.01)
                    peak = max(peak, _rss_mb(served.process.pid))
            enqueued = len(enqueue_ms)
            await asyncio.sleep(1)
            started = len(tenant.started) - started_before
            rss_after = _rss_mb(served.process.pid)
            await tenant.close()
            stop_s = served.stop()  # while the attacker still floods
            attacker.kill()
            await attacker.wait()
        finally:
            if served.process.poll() is None:
                served.process.kill()
    return {
        "enqueued": enqueued,
        "started": started,
        "enqueue_p50_quiet_ms": statistics.median(quiet_ms),
        "enqueue_p50_flood_ms": statistics.median(enqueue_ms),
        "started_fraction": started / max(enqueued, 1),
        "rss_before_mb": rss_before,
        "rss_peak_mb": peak,
        "rss_after_mb": rss_after,
        "sigterm_to_exit_s": stop_s,
    }


async def _attack(target: str, token: str, seconds: float) -> None:
    """Heartbeats of 10,000 made-up IDs, as fast as the stream takes them."""
    ids = [uuid7(1_700_000_000_000 + n) for n in range(STREAM_BOUNDS.max_heartbeat_attempts)]
    heartbeat = pb.ConnectRequest(heartbeat=pb.Heartbeat(attempt_ids=ids))
    # The most capacity: the largest budget, and the most made-up IDs it may have looked up.
    hello = pb.ConnectRequest(
        hello=pb.Hello(
            worker_id="flooder", queues=["attacker"], wire_names=[WIRE], capacity=STREAM_BOUNDS.max_capacity
        )
    )
    deadline = time.monotonic() + seconds

    async def requests() -> AsyncIterator[pb.ConnectRequest]:
        yield hello
        while time.monotonic() < deadline:
            yield heartbeat

    async with grpc.aio.insecure_channel(target) as channel:
        stub = worker_service_pb2_grpc.WorkerServiceStub(channel)
        call = stub.Connect(requests(), metadata=(("authorization", f"Bearer {token}"),))
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for _ in call:  # read the answers too, so only the coordinator's bounds hold it back
                pass


async def _enqueue_times(client: AsyncClient, count: int, settle_s: float = 0.2) -> list[float]:
    """Milliseconds of ``count`` enqueue calls of one job each, one after another."""
    times = []
    for _ in range(count):
        began = time.perf_counter()
        await client.enqueue_raw(WIRE, b"{}", queue="victim")
        times.append((time.perf_counter() - began) * 1000)
    await asyncio.sleep(settle_s)
    return times


@contextlib.asynccontextmanager
async def _wide_stream(target: str, token: str) -> AsyncIterator[None]:
    """A stream whose Hello names the most queues and wire names allowed, with all of
    its capacity in credit, connected for the block."""
    bounds = STREAM_BOUNDS
    hello = pb.Hello(
        worker_id="wide",
        queues=[f"wide-{n}" for n in range(bounds.max_hello_queues)],
        wire_names=[f"wide.{n}" for n in range(bounds.max_hello_wire_names)],
        capacity=bounds.max_capacity,
    )
    opening = [pb.ConnectRequest(hello=hello), pb.ConnectRequest(credit=pb.Credit(count=bounds.max_capacity))]

    async def requests() -> AsyncIterator[pb.ConnectRequest]:
        for message in opening:
            yield message
        await asyncio.Event().wait()  # the stream stays open

    async with grpc.aio.insecure_channel(target) as channel:
        stub = worker_service_pb2_grpc.WorkerServiceStub(channel)
        call = stub.Connect(requests(), metadata=(("authorization", f"Bearer {token}"),))
        welcome = await call.read()
        assert isinstance(welcome, pb.ConnectResponse) and welcome.WhichOneof("kind") == "welcome", welcome
        await asyncio.sleep(0.5)  # its first claim (of every queue) is made
        try:
            yield
        finally:
            call.cancel()


async def wide_hello(engine: str, count: int, blocks: int = 5) -> dict[str, float]:
    """The other tenant's enqueue times in alternating blocks without and with the wide
    stream connected (the machine is shared: alternating keeps drift out of the ratio)."""
    with tempfile.TemporaryDirectory() as folder, _database(engine, Path(folder)) as url:
        served = Served(url, Path(folder))
        try:
            victim_token, attacker_token = await _tokens(served, "victim", None)
            tenant = Tenant(served.target, victim_token, "victim")
            baseline: list[float] = []
            wide: list[float] = []
            async with AsyncClient(served.target, token=victim_token) as client:
                await _enqueue_times(client, 20)  # warm-up
                for _ in range(blocks):
                    baseline += await _enqueue_times(client, count // blocks)
                    async with _wide_stream(served.target, attacker_token):
                        wide += await _enqueue_times(client, count // blocks)
            await tenant.close()
        finally:
            served.stop()
    base_p50, wide_p50 = statistics.median(baseline), statistics.median(wide)
    return {"baseline_p50_ms": base_p50, "wide_p50_ms": wide_p50, "ratio": wide_p50 / base_p50}


def _figures(figures: dict[str, float]) -> str:
    return ", ".join(f"{name}={value:.2f}" for name, value in figures.items())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the heartbeat flood")
    parser.add_argument("--rate", type=float, default=200.0, help="the other tenant's jobs per second")
    parser.add_argument("--enqueues", type=int, default=200, help="enqueue calls timed per p50")
    parser.add_argument("--attack", nargs=3, metavar=("TARGET", "TOKEN", "SECONDS"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.attack:
        target, token, seconds = options.attack
        asyncio.run(_attack(target, token, float(seconds)))
        return
    engines = ["sqlite", "postgres"] if options.engine == "both" else [options.engine]
    print(f"machine: {os.cpu_count()} cores; {os.uname().sysname} {os.uname().release}")
    for engine in engines:
        flood = asyncio.run(heartbeat_flood(engine, options.seconds, options.rate))
        print(f"{engine} (a) heartbeat flood: {_figures(flood)}", flush=True)
        wide = asyncio.run(wide_hello(engine, options.enqueues))
        print(f"{engine} (b) wide hello: {_figures(wide)}", flush=True)


if __name__ == "__main__":
    main()
