"""What each known attack costs a real coordinator, and what another client sees meanwhile.

Starts ``runwick serve`` from this tree as a subprocess (SQLite in a temporary directory,
or ``--database-url``), then runs each attack in turn while a probe client (another
tenant, with a valid token) enqueues one job every 20 ms. For each attack it prints how
the coordinator answered and how long that took, the coordinator's peak RSS growth over
its resident size before the attack, and the probe's p50 and worst latency during the
attack. Figures move with the machine: compare two trees in one sitting.

    python benchmarks/abuse.py                          # every attack, SQLite
    python benchmarks/abuse.py --only unauth_enqueue    # one of them
    python benchmarks/abuse.py --database-url postgresql+psycopg://postgres@127.0.0.1/db
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from worker_sdk.proto.runwick.v1 import job_service_pb2, queue_pb2

ROOT = Path(__file__).resolve().parents[1]
PROBE_INTERVAL_S = 0.02


@dataclass
class Outcome:
    attack: str
    answer: str
    seconds: float
    rss_growth_mb: float = 0.0
    probe_p50_ms: float = 0.0
    probe_max_ms: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def new_token() -> str:
    return f"rwk_{secrets.token_hex(8)}_{secrets.token_urlsafe(32)[:43]}"


class Coordinator:
    """``runwick serve`` with every port on a free port and a known admin token."""

    def __init__(self, workdir: Path, database_url: str | None) -> None:
        self.token = new_token()
        self.port, self.health, self.metrics, self.dashboard = (free_port() for _ in range(4))
        self.tmpdir = workdir / "tmp"
        self.tmpdir.mkdir()
        env = dict(os.environ, RUNWICK_BOOTSTRAP_TOKEN=self.token, TMPDIR=str(self.tmpdir))
        env["PYTHONPATH"] = str(ROOT)
        url = database_url or f"sqlite:///{workdir / 'runwick.db'}"
        if database_url:
            subprocess.run(
                [sys.executable, "-m", "coordinator.cli", "migrate", "--database-url", url],
                check=True,
                env=env,
                cwd=ROOT,
                capture_output=True,
            )
        self.log = workdir / "serve.log"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "serve",
                "--database-url",
                url,
                "--port",
                str(self.port),
                "--health-port",
                str(self.health),
                "--metrics-port",
                str(self.metrics),
                "--dashboard-port",
                str(self.dashboard),
            ],
            env=env,
            cwd=ROOT,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while "listening on" not in self.log.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"serve did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        self.target = f"127.0.0.1:{self.port}"

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]

    def open_temp_bytes(self) -> int:
        """Bytes in files the coordinator holds open under its TMPDIR: spooled uploads are
        unlinked (or made with O_TMPFILE), so only its descriptors show them."""
        total = 0
        fds = Path(f"/proc/{self.process.pid}/fd")
        for fd in list(fds.iterdir()) if fds.exists() else []:
            with contextlib.suppress(OSError):
                if os.readlink(fd).startswith(str(self.tmpdir)):
                    total += os.stat(fd).st_size
        return total

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()


@contextlib.contextmanager
def watched(coordinator: Coordinator, probe_token: str) -> Iterator[dict[str, float]]:
    """Samples the coordinator's RSS and runs the probe client while the block runs."""
    figures: dict[str, float] = {}
    base = coordinator.rss_mb()
    peak = [base]
    latencies: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            with contextlib.suppress(Exception):
                peak[0] = max(peak[0], coordinator.rss_mb())

    def probe() -> None:
        channel = grpc.insecure_channel(coordinator.target)
        enqueue = channel.unary_unary(
            "/runwick.v1.JobService/Enqueue",
            request_serializer=job_service_pb2.EnqueueRequest.SerializeToString,
            response_deserializer=job_service_pb2.EnqueueResponse.FromString,
        )
        request = job_service_pb2.EnqueueRequest(
            jobs=[job_service_pb2.NewJob(wire_name="probe.job", queue="probe", payload=b"{}")]
        )
        metadata = (("authorization", f"Bearer {probe_token}"),)
        while not done.is_set():
            started = time.perf_counter()
            with contextlib.suppress(grpc.RpcError):
                enqueue(request, metadata=metadata, timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            time.sleep(PROBE_INTERVAL_S)
        channel.close()

    threads = [threading.Thread(target=sample), threading.Thread(target=probe)]
    for thread in threads:
        thread.start()
    try:
        yield figures
    finally:
        time.sleep(0.5)  # the probe's view just after the attack counts too
        done.set()
        for thread in threads:
            thread.join()
        figures["rss_growth_mb"] = peak[0] - base
        figures["probe_p50_ms"] = statistics.median(latencies) if latencies else float("nan")
        figures["probe_max_ms"] = max(latencies, default=float("nan"))


def raw_call(target: str, method: str, body: bytes, token: str | None) -> tuple[str, float]:
    channel = grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)])
    call = channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    started = time.perf_counter()
    try:
        call(body, metadata=metadata, timeout=120)
        answer = "OK"
    except grpc.RpcError as error:
        answer = f"{error.code().name}: {(error.details() or '')[:80]}"
    finally:
        channel.close()
    return answer, time.perf_counter() - started


def empty_jobs(count: int) -> bytes:
    """An EnqueueRequest of ``count`` empty NewJob messages: two bytes each on the wire."""
    return b"\x0a\x00" * count


def attack_unauth_enqueue(c: Coordinator) -> Outcome:
    answer, seconds = raw_call(c.target, "/runwick.v1.JobService/Enqueue", empty_jobs(15_000_000), None)
    return Outcome("unauthenticated 30 MB Enqueue", answer, seconds)


def attack_unauth_getjob_many(c: Coordinator) -> Outcome:
    body = b"\x0a\x00" * 15_000_000  # field 1 (id) repeated: parsed as one string, kept as bytes
    results: list[tuple[str, float]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(raw_call(c.target, "/runwick.v1.JobService/GetJob", body, None))
        )
        for _ in range(16)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answers = Counter(answer.split(":")[0] for answer, _ in results)
    return Outcome("16 unauthenticated 30 MB GetJob", dict(answers).__repr__(), time.perf_counter() - started)


def attack_enqueue_5m(c: Coordinator) -> Outcome:
    answer, seconds = raw_call(c.target, "/runwick.v1.JobService/Enqueue", empty_jobs(5_000_000), c.token)
    return Outcome("5,000,000-job Enqueue (valid token)", answer, seconds)


def attack_multipart_signin(c: Coordinator) -> Outcome:
    size = 50 * 1024 * 1024
    boundary = "runwickabuse"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="token"; filename="t"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    peak_disk = [0]
    done = threading.Event()

    def disk() -> None:
        while not done.wait(0.01):
            peak_disk[0] = max(peak_disk[0], c.open_temp_bytes())

    watcher = threading.Thread(target=disk)
    watcher.start()
    connection = http.client.HTTPConnection("127.0.0.1", c.dashboard, timeout=120)
    started = time.perf_counter()
    try:
        connection.putrequest("POST", "/signin")
        connection.putheader("Content-Type", f"multipart/form-data; boundary={boundary}")
        connection.putheader("Content-Length", str(len(head) + size + len(tail)))
        connection.endheaders()
        connection.send(head)
        chunk = b"x" * (1024 * 1024)
        for _ in range(size // len(chunk)):
            connection.send(chunk)
        connection.send(tail)
        answer = f"HTTP {connection.getresponse().status}"
    except OSError as error:  # the server may close before the body is sent
        answer = f"closed early ({type(error).__name__})"
        with contextlib.suppress(Exception):
            answer += f", HTTP {connection.getresponse().status}"
    seconds = time.perf_counter() - started
    connection.close()
    done.set()
    watcher.join()
    return Outcome("50 MB multipart sign-in", answer, seconds, extra={"disk_mb": peak_disk[0] / 2**20})


def attack_metric_series(c: Coordinator) -> Outcome:
    channel = grpc.insecure_channel(c.target)
    enqueue = channel.unary_unary(
        "/runwick.v1.JobService/Enqueue",
        request_serializer=job_service_pb2.EnqueueRequest.SerializeToString,
        response_deserializer=job_service_pb2.EnqueueResponse.FromString,
    )
    metadata = (("authorization", f"Bearer {c.token}"),)
    pairs = [(f"sq{q}", f"spray.w{w}") for q in range(60) for w in range(60)]
    started = time.perf_counter()
    answers: Counter[str] = Counter()
    for first in range(0, len(pairs), 500):
        batch = pairs[first : first + 500]
        jobs = [job_service_pb2.NewJob(wire_name=w, queue=q, payload=b"{}") for q, w in batch]
        try:
            enqueue(job_service_pb2.EnqueueRequest(jobs=jobs), metadata=metadata)
            answers["OK"] += 1
        except grpc.RpcError as error:
            answers[error.code().name] += 1
    seconds = time.perf_counter() - started
    channel.close()
    scrape = http.client.HTTPConnection("127.0.0.1", c.metrics, timeout=30)
    scrape.request("GET", "/metrics")
    text = scrape.getresponse().read().decode()
    series: Counter[str] = Counter()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            series[re.sub(r"_(bucket|sum|count|created|total)$", "", name)] += 1
    family, most = series.most_common(1)[0]
    return Outcome(
        "3,600 queue x wire-name pairs",
        dict(answers).__repr__(),
        seconds,
        extra={"largest_family": family, "its_series": most},
    )


def attack_health_watches(c: Coordinator, streams: int = 4000) -> Outcome:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channels = [grpc.insecure_channel(f"127.0.0.1:{c.health}") for _ in range(streams // 100)]
    calls = []
    started = time.perf_counter()
    for i in range(streams):
        stub = health_pb2_grpc.HealthStub(channels[i % len(channels)])
        calls.append(stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10))
    accepted = 0
    for call in calls:
        with contextlib.suppress(grpc.RpcError, StopIteration):
            next(call)
            accepted += 1
    seconds = time.perf_counter() - started
    for call in calls:
        call.cancel()
    for channel in channels:
        channel.close()
    return Outcome(f"{streams} tokenless health Watch streams", f"{accepted} accepted", seconds)


def attack_queue_sprawl(c: Coordinator, queues: int = 20_000) -> Outcome:
    channel = grpc.insecure_channel(c.target, options=[("grpc.max_receive_message_length", 64 * 2**20)])
    metadata = (("authorization", f"Bearer {c.token}"),)
    enqueue = channel.unary_unary(
        "/runwick.v1.JobService/Enqueue",
        request_serializer=job_service_pb2.EnqueueRequest.SerializeToString,
        response_deserializer=job_service_pb2.EnqueueResponse.FromString,
    )
    created = 0
    refused = Counter[str]()
    started = time.perf_counter()
    for first in range(0, queues, 500):
        jobs = [
            job_service_pb2.NewJob(wire_name="sprawl.job", queue=f"cq{n}", payload=b"{}")
            for n in range(first, min(first + 500, queues))
        ]
        try:
            enqueue(job_service_pb2.EnqueueRequest(jobs=jobs), metadata=metadata)
            created += len(jobs)
        except grpc.RpcError as error:
            refused[error.code().name] += 1
    seconds = time.perf_counter() - started
    list_queues = channel.unary_unary(
        "/runwick.v1.AdminService/ListQueues",
        request_serializer=queue_pb2.ListQueuesRequest.SerializeToString,
        response_deserializer=lambda b: b,
    )
    listed = time.perf_counter()
    body = list_queues(queue_pb2.ListQueuesRequest(), metadata=metadata)
    list_ms = (time.perf_counter() - listed) * 1000
    channel.close()
    return Outcome(
        f"{queues:,} new queues from one token",
        f"{created} jobs in new queues, refused {dict(refused)}",
        seconds,
        extra={"list_queues_ms": round(list_ms, 1), "list_queues_kb": round(len(body) / 1024, 1)},
    )


ATTACKS: dict[str, Callable[[Coordinator], Outcome]] = {
    "unauth_enqueue": attack_unauth_enqueue,
    "unauth_getjob_many": attack_unauth_getjob_many,
    "enqueue_5m": attack_enqueue_5m,
    "multipart_signin": attack_multipart_signin,
    "metric_series": attack_metric_series,
    "health_watches": attack_health_watches,
    "queue_sprawl": attack_queue_sprawl,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(ATTACKS), help="run only these")
    parser.add_argument("--database-url", help="a migrated-or-empty database (default: a new SQLite file)")
    parser.add_argument("--json", action="store_true", help="one JSON object a line instead of a table")
    options = parser.parse_args()
    print("| attack | answer | s | RSS growth MB | other client p50 / max ms | more |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in options.only or list(ATTACKS):
        with tempfile.TemporaryDirectory() as workdir:
            coordinator = Coordinator(Path(workdir), options.database_url)
            try:
                with watched(coordinator, coordinator.token) as figures:
                    outcome = ATTACKS[name](coordinator)
                outcome.rss_growth_mb = round(figures["rss_growth_mb"], 1)
                outcome.probe_p50_ms = round(figures["probe_p50_ms"], 1)
                outcome.probe_max_ms = round(figures["probe_max_ms"], 1)
                if not coordinator.alive():
                    outcome.extra["coordinator"] = "died"
            finally:
                coordinator.stop()
        if options.json:
            print(json.dumps(outcome.__dict__))
        else:
            more = ", ".join(f"{k} {v}" for k, v in outcome.extra.items())
            print(
                f"| {outcome.attack} | {outcome.answer} | {outcome.seconds:.2f} | {outcome.rss_growth_mb} "
                f"| {outcome.probe_p50_ms} / {outcome.probe_max_ms} | {more} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
