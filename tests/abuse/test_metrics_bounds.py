"""Abuse of the coordinator's metrics, against a real coordinator (real gRPC server on
port 0, real SQLite file and PostgreSQL, the real ``/metrics`` port):

- an enqueue token sprays queue x wire-name pairs: every metric keeps at most
  ``metrics_max_series`` series, counted from the real ``/metrics`` text;
- hundreds of half-sent requests: no thread per connection, the surplus closed at
  once, the rest after the idle time, and the coordinator keeps serving;
- an oversized request head is refused;
- with ``metrics_tls`` and a token: a scrape over TLS with the token works, plaintext,
  no token, a wrong token, or (under mutual TLS) no client certificate are refused.
"""

from __future__ import annotations

import asyncio
import http.client
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from coordinator.config import CoordinatorConfig
from coordinator.metrics import OVERFLOW
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.test_tls import Pki, pki  # noqa: F401 - the certificates fixture
from tests.support import eventually_async
from worker_sdk import AsyncClient, JobContext, MetricsHttpLimits, Worker, job
from worker_sdk.proto.runwick.v1 import job_service_pb2 as pb
from worker_sdk.proto.runwick.v1 import job_service_pb2_grpc

SPRAY_SIDE = 60
"""60 queues x 60 wire names: 3,600 pairs, each under the per-label cap of 100."""
METRICS_TOKEN = "scrape-token-0123456789abcdef"
PARTIAL_REQUESTS = 300
MAX_CONNECTIONS = 8


def scrape(url: str, *, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None) -> str:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        body: bytes = response.read()
    return body.decode()


def series_by_family(exposition: str) -> dict[str, int]:
    """Label combinations per metric family (a histogram's buckets of one combination
    count once), from the text a scraper reads."""
    families: dict[str, set[tuple[tuple[str, str], ...]]] = {}
    for family in text_string_to_metric_families(exposition):
        combos = families.setdefault(family.name, set())
        for sample in family.samples:
            labels = {name: value for name, value in sample.labels.items() if name not in ("le", "quantile")}
            combos.add(tuple(sorted(labels.items())))
    return {name: len(combos) for name, combos in families.items()}


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[RunningCoordinator]:
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=database_url,
            port=0,
            metrics_port=0,
            auth_enabled=True,
            drain_timeout_s=1,
            metrics_max_connections=MAX_CONNECTIONS,
            metrics_idle_timeout_s=1.0,
        )
    )
    try:
        yield running
    finally:
        await running.stop(grace_s=1)


async def enqueue_token(running: RunningCoordinator) -> str:
    async with AsyncClient(running.target, token=running.bootstrap_token) as admin:
        created = await admin.create_token("sprayer", ["enqueue"])
    return created.secret


async def test_an_enqueue_token_spraying_queue_and_wire_name_pairs_leaves_every_metric_bounded(
    secured: RunningCoordinator,
) -> None:
    token = await enqueue_token(secured)
    pairs = [(f"q{q}", f"spray.w{w}") for q in range(SPRAY_SIDE) for w in range(SPRAY_SIDE)]
    async with grpc.aio.insecure_channel(secured.target) as channel:
        stub = job_service_pb2_grpc.JobServiceStub(channel)
        metadata = (("authorization", f"Bearer {token}"),)
        for start in range(0, len(pairs), 500):
            jobs = [pb.NewJob(wire_name=w, queue=q, payload=b"{}") for q, w in pairs[start : start + 500]]
            answer = await stub.Enqueue(pb.EnqueueRequest(jobs=jobs), metadata=metadata)
            assert len(answer.jobs) == len(jobs)

    url = f"http://127.0.0.1:{secured.metrics_port}/metrics"
    exposition = await asyncio.to_thread(scrape, url)
    cap = secured.config.metrics_max_series
    counts = series_by_family(exposition)
    assert counts["runwick_jobs_enqueued"] <= cap
    assert max(counts.values()) <= cap, {name: n for name, n in counts.items() if n > cap}
    # Nothing is lost: the pairs past the cap are counted, under (other) in both labels.
    enqueued = {
        (sample.labels["queue"], sample.labels["wire_name"]): sample.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "runwick_jobs_enqueued"
        for sample in family.samples
        if sample.name == "runwick_jobs_enqueued_total"
    }
    assert sum(enqueued.values()) == len(pairs)
    assert enqueued[(OVERFLOW, OVERFLOW)] > 0
    # The coordinator keeps serving: another client's enqueue is counted in its own series.
    async with AsyncClient(secured.target, token=token) as client:
        await client.enqueue_raw("spray.w0", b"{}", queue="q0")
    after = {
        (sample.labels["queue"], sample.labels["wire_name"]): sample.value
        for family in text_string_to_metric_families(await asyncio.to_thread(scrape, url))
        if family.name == "runwick_jobs_enqueued"
        for sample in family.samples
        if sample.name == "runwick_jobs_enqueued_total"
    }
    assert after[("q0", "spray.w0")] == enqueued[("q0", "spray.w0")] + 1


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Waits until the server closes the connection (EOF or reset); True then."""
    try:
        while await reader.read(4096):
            pass
    except ConnectionError:
        pass
    return True


async def half_send(port: int, count: int) -> tuple[list[asyncio.StreamWriter], list[asyncio.Task[bool]]]:
    """Opens ``count`` connections to ``port``, each sending a request head without its
    end; returns them with a task per connection that ends when the server closes it."""
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(count)]
    for _, writer in connections:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: runwick\r\n")  # never the blank line
        await writer.drain()
    return [w for _, w in connections], [asyncio.ensure_future(closed_by_server(r)) for r, _ in connections]


async def surplus_closed(closing: list[asyncio.Task[bool]], held: int) -> None:
    """Waits until every connection past the ``held`` ones the server keeps is closed."""

    async def closed() -> bool:
        return sum(task.done() for task in closing) >= len(closing) - held

    await eventually_async(closed, timeout=30, what="the connections past the cap to be closed")


async def test_hundreds_of_half_sent_requests_get_no_threads_and_are_closed(
    secured: RunningCoordinator,
) -> None:
    threads_before = threading.active_count()
    assert secured.metrics_port is not None
    writers, closing = await half_send(secured.metrics_port, PARTIAL_REQUESTS)
    try:
        # Past the connection cap, connections are closed as they come, unread.
        await surplus_closed(closing, MAX_CONNECTIONS)
        assert threading.active_count() <= threads_before + 2  # no thread per connection
        # The coordinator keeps serving its API meanwhile.
        async with AsyncClient(secured.target, token=secured.bootstrap_token) as client:
            assert await client.list_queues() is not None
        # The ones it held are closed after the idle time (1 s here), never answered.
        await asyncio.wait_for(asyncio.gather(*closing), timeout=60)
    finally:
        for task in closing:
            task.cancel()
        for writer in writers:
            writer.close()
    assert secured.metrics_server is not None and secured.metrics_server.open_connections == 0
    # And /metrics serves the next scraper.
    exposition = await asyncio.to_thread(scrape, f"http://127.0.0.1:{secured.metrics_port}/metrics")
    assert "runwick_database_up" in exposition


@job("abuse.metrics.noop")
@dataclass
class Noop:
    pass


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) of listening sockets on
    ``port``: 0100007F is 127.0.0.1, 00000000 is every address."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


async def test_the_worker_serves_its_metrics_on_loopback_without_a_thread_per_connection(
    secured: RunningCoordinator,
) -> None:
    async with AsyncClient(secured.target, token=secured.bootstrap_token) as admin:
        work_token = (await admin.create_token("worker", ["work"])).secret
    worker = Worker(
        secured.target,
        token=work_token,
        metrics_registry=CollectorRegistry(),
        metrics_port=0,
        metrics_limits=MetricsHttpLimits(max_connections=4, idle_timeout_s=1),
    )

    @worker.handler(Noop)
    async def noop(job: Noop, ctx: JobContext) -> None:
        return None

    await worker.start()
    try:
        port = worker.metrics_port
        assert port is not None
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only, by default
        threads_before = threading.active_count()
        writers, closing = await half_send(port, 100)
        try:
            await surplus_closed(closing, 4)
            assert threading.active_count() <= threads_before + 2
            await asyncio.wait_for(asyncio.gather(*closing), timeout=60)
        finally:
            for writer in writers:
                writer.close()
        exposition = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
        assert "runwick_worker_connected_streams" in exposition
    finally:
        await worker.stop()


async def test_an_oversized_request_head_is_refused(secured: RunningCoordinator) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", secured.metrics_port)
    padding = "x" * (secured.config.metrics_max_header_bytes * 2)
    writer.write(f"GET /metrics HTTP/1.1\r\nX-Padding: {padding}\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"runwick_" not in answer


@pytest.fixture
async def tls_metrics(database_url: str, pki: Pki) -> AsyncIterator[RunningCoordinator]:  # noqa: F811
    running = await start_coordinator(
        CoordinatorConfig(
            database_url=database_url,
            port=0,
            metrics_port=0,
            auth_enabled=True,
            drain_timeout_s=1,
            tls_cert_file=str(pki.server_cert),
            tls_key_file=str(pki.server_key),
            tls_client_ca_file=str(pki.ca),
            metrics_tls=True,
            metrics_token=METRICS_TOKEN,
            metrics_idle_timeout_s=2.0,
        )
    )
    try:
        yield running
    finally:
        await running.stop(grace_s=1)


def client_context(pki: Pki, *, certificate: bool) -> ssl.SSLContext:  # noqa: F811
    context = ssl.create_default_context(cafile=str(pki.ca))
    if certificate:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return context


async def test_under_mutual_tls_metrics_need_tls_a_client_certificate_and_the_token(
    tls_metrics: RunningCoordinator,
    pki: Pki,  # noqa: F811
) -> None:
    port = tls_metrics.metrics_port
    https, plain = f"https://127.0.0.1:{port}/metrics", f"http://127.0.0.1:{port}/metrics"
    bearer = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    good = client_context(pki, certificate=True)

    exposition = await asyncio.to_thread(scrape, https, headers=bearer, context=good)
    assert "runwick_database_up" in exposition

    with pytest.raises(urllib.error.HTTPError) as no_token:
        await asyncio.to_thread(scrape, https, context=good)
    with no_token.value as refused:
        assert refused.code == 401 and b"runwick_" not in refused.read()
    with pytest.raises(urllib.error.HTTPError) as wrong_token:
        await asyncio.to_thread(
            scrape, https, headers={"Authorization": "Bearer not-the-token"}, context=good
        )
    with wrong_token.value as refused:
        assert refused.code == 401
    # Plaintext gets no answer at all: the port speaks TLS only.
    with pytest.raises((OSError, http.client.HTTPException)):
        await asyncio.to_thread(scrape, plain, headers=bearer)
    # Without a client certificate the handshake fails, before any request is read.
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        await asyncio.to_thread(scrape, https, headers=bearer, context=client_context(pki, certificate=False))
    # The refusals left nothing open and the port still serves.
    assert "runwick_database_up" in await asyncio.to_thread(scrape, https, headers=bearer, context=good)
