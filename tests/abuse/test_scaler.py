"""The scaler port (KEDA's external scaler, docs/autoscaling.md) attacked by a caller
without a token: bad trigger metadata is refused and changes nothing, streams past the
cap get RESOURCE_EXHAUSTED, an oversized request is refused unread, a count never reads
more than its cap, the port serves nothing but the scaler (no job, payload or queue
control crosses it), and under mutual TLS a caller without a client certificate gets
nothing. A real coordinator on port 0, both engines; it keeps serving other callers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from coordinator.config import CoordinatorConfig, ScalerLimits
from coordinator.process import RunningCoordinator, start_coordinator
from tests.integration.test_tls import Pki, pki  # noqa: F401 (the fixture)
from tests.integration.worker_app import Echo
from tests.support import eventually_async
from worker_sdk import AsyncClient, Unauthenticated
from worker_sdk.proto.keda import externalscaler_pb2 as pb
from worker_sdk.proto.keda import externalscaler_pb2_grpc as pb_grpc
from worker_sdk.proto.runwick.v1 import job_service_pb2, job_service_pb2_grpc

QUEUE = "work"


@asynccontextmanager
async def serving(database_url: str, **config: Any) -> AsyncIterator[tuple[RunningCoordinator, Any]]:
    running = await start_coordinator(
        CoordinatorConfig(database_url=database_url, port=0, scaler_port=0, drain_timeout_s=1, **config)
    )
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.scaler_port}")
    try:
        yield running, pb_grpc.ExternalScalerStub(channel)
    finally:
        await channel.close(None)
        await running.stop(grace_s=1)


def ref(**metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="workers", namespace="jobs", scalerMetadata=metadata)


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_bad_trigger_metadata_is_refused_naming_the_key_and_nothing_is_read(database_url: str) -> None:
    async with serving(database_url) as (running, scaler):
        bad = [
            ({}, "scalerMetadata.queue"),
            ({"queue": "no spaces"}, "scalerMetadata.queue"),
            ({"queue": QUEUE, "horizonSeconds": "99999999999"}, "scalerMetadata.horizonSeconds"),
            ({"queue": QUEUE, "slotsPerReplica": "-3"}, "scalerMetadata.slotsPerReplica"),
            ({"queue": QUEUE, "wireNames": ",".join(f"w{n}" for n in range(65))}, "scalerMetadata.wireNames"),
        ]
        for metadata, field in bad:
            for call in (
                scaler.IsActive(ref(**metadata)),
                scaler.GetMetricSpec(ref(**metadata)),
                scaler.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(**metadata))),
            ):
                error = await refused(call)
                assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
                assert field in (error.details() or "")
            stream = scaler.StreamIsActive(ref(**metadata))
            error = await refused(stream.read())
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        # Nothing was made: no queue is known, and the port answers a good trigger.
        assert (await running.app.list_queues())[0] == []
        assert (await scaler.IsActive(ref(queue=QUEUE))).result is False


async def test_streams_past_the_cap_are_refused_and_a_closed_one_frees_its_place(database_url: str) -> None:
    async with serving(database_url, scaler=ScalerLimits(max_streams=2)) as (_, scaler):
        # Refused streams take no place: many bad ones first.
        for _ in range(5):
            assert (
                await refused(scaler.StreamIsActive(ref()).read())
            ).code() is grpc.StatusCode.INVALID_ARGUMENT
        held = [scaler.StreamIsActive(ref(queue=QUEUE)) for _ in range(2)]
        for stream in held:
            assert (await asyncio.wait_for(stream.read(), 10)).result is False
        extra = scaler.StreamIsActive(ref(queue=QUEUE))
        error = await refused(extra.read())
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_streams" in (error.details() or "")
        assert (await scaler.IsActive(ref(queue=QUEUE))).result is False  # unary calls still served
        held.pop().cancel()

        async def another_opens() -> bool:
            stream = scaler.StreamIsActive(ref(queue=QUEUE))
            try:
                return (await asyncio.wait_for(stream.read(), 10)).result is False
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                return False
            finally:
                stream.cancel()

        await eventually_async(another_opens, what="a stream opens once one has closed")
        for stream in held:
            stream.cancel()


async def test_an_oversized_request_is_refused_unread(database_url: str) -> None:
    async with serving(database_url) as (_, scaler):
        error = await refused(scaler.IsActive(ref(queue=QUEUE, filler="x" * 100_000)))
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await scaler.IsActive(ref(queue=QUEUE))).result is False


async def test_a_count_reads_at_most_its_cap_of_jobs(database_url: str) -> None:
    async with serving(database_url, scaler=ScalerLimits(max_counted_jobs=3)) as (running, scaler):
        async with AsyncClient(running.target) as client:
            await client.enqueue_many(Echo(f"job {n}") for n in range(7))
        request = pb.GetMetricsRequest(scaledObjectRef=ref(queue="default"), metricName="runwick-slots")
        (value,) = (await scaler.GetMetrics(request)).metricValues
        assert value.metricValue == 3
        assert (await scaler.IsActive(ref(queue="default"))).result is True


async def test_the_scaler_port_serves_only_the_scaler_and_asks_no_token(database_url: str) -> None:
    async with serving(database_url, auth_enabled=True) as (running, scaler):
        async with AsyncClient(running.target, token=running.bootstrap_token) as client:
            job_id = await client.enqueue(Echo("secret payload"), queue=QUEUE)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.scaler_port}")
        try:
            jobs = job_service_pb2_grpc.JobServiceStub(channel)
            error = await refused(jobs.GetJob(job_service_pb2.GetJobRequest(id=job_id)))
            assert error.code() is grpc.StatusCode.UNIMPLEMENTED
        finally:
            await channel.close(None)
        # The counts need no token; the API port still does.
        assert (await scaler.IsActive(ref(queue=QUEUE))).result is True
        async with AsyncClient(running.target) as anonymous:
            with pytest.raises(Unauthenticated):
                await anonymous.get(job_id)


async def test_under_mutual_tls_a_caller_without_a_client_certificate_gets_nothing(
    database_url: str,
    pki: Pki,  # noqa: F811
) -> None:
    tls = {
        "tls_cert_file": str(pki.server_cert),
        "tls_key_file": str(pki.server_key),
        "tls_client_ca_file": str(pki.ca),
        "auth_enabled": True,
    }
    async with serving(database_url, **tls) as (running, _):
        target = f"127.0.0.1:{running.scaler_port}"
        anonymous = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(pki.ca.read_bytes()))
        keda = grpc.aio.secure_channel(
            target,
            grpc.ssl_channel_credentials(
                pki.ca.read_bytes(), pki.client_key.read_bytes(), pki.client_cert.read_bytes()
            ),
        )
        try:
            error = await refused(pb_grpc.ExternalScalerStub(anonymous).IsActive(ref(queue=QUEUE), timeout=5))
            assert error.code() is grpc.StatusCode.UNAVAILABLE
            answer = await pb_grpc.ExternalScalerStub(keda).IsActive(ref(queue=QUEUE), timeout=10)
            assert answer.result is False
        finally:
            await anonymous.close(None)
            await keda.close(None)


async def test_reads_past_the_cap_are_refused_while_the_others_finish(database_url: str) -> None:
    limits = ScalerLimits(max_concurrent_reads=1)
    async with serving(database_url, scaler=limits) as (running, scaler):
        app = running.app
        read = app.slot_demand
        release = asyncio.Event()
        entered = asyncio.Event()

        async def held(*args: Any, **kwargs: Any) -> Any:
            entered.set()
            await release.wait()  # a slow database, or many callers at once
            return await read(*args, **kwargs)

        app.slot_demand = held  # type: ignore[method-assign]
        try:
            first = asyncio.ensure_future(scaler.IsActive(ref(queue=QUEUE)))
            await asyncio.wait_for(entered.wait(), 10)
            request = pb.GetMetricsRequest(scaledObjectRef=ref(queue=QUEUE))
            error = await refused(scaler.GetMetrics(request, timeout=10))
            assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_concurrent_reads" in (error.details() or "")
            release.set()
            assert (await first).result is False
        finally:
            app.slot_demand = read  # type: ignore[method-assign]
        assert (await scaler.IsActive(ref(queue=QUEUE))).result is False  # its place is free again
