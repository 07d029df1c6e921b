"""KEDA's external scaler (``externalscaler.ExternalScaler``, docs/autoscaling.md), served
on its own port (``scaler_port``): the worker slots a queue wants, for KEDA to scale a
worker Deployment by.

A trigger's metadata names the target: ``queue`` (required), ``wireNames`` (comma-
separated; only those jobs count), ``horizonSeconds`` (scheduled jobs due within it count
as due now) and ``slotsPerReplica`` (the slots one worker replica runs; default 1). The
number is the queue's leased jobs (reserved or running: their workers hold leases, so
they are never scaled away) plus its jobs claimable now or within the horizon (none while
the queue is paused), read from the database, so every replica answers the same.

KEDA sends no bearer token, so this port asks for none: it serves nothing but these
counts, with the API port's TLS (under mutual TLS, KEDA's client certificate is its
credential). Every bound on what a caller asks (``ScalerLimits``) is checked before the
database is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from coordinator.api.errors import abort
from coordinator.app import Coordinator
from coordinator.app.arrivals import Arrivals
from coordinator.config import ScalerLimits
from coordinator.domain.demand import DemandTarget
from coordinator.errors import CoordinatorError, InvalidArgument, ResourceExhausted
from coordinator.validation import check_name
from worker_sdk.proto.keda import externalscaler_pb2 as pb
from worker_sdk.proto.keda import externalscaler_pb2_grpc as pb_grpc

METRIC_NAME = "runwick-slots"
"""The one metric each trigger has: the worker slots its target wants."""
MAX_NUMBER_CHARS = 12
"""Digits a number in the metadata may have; longer is refused before it is parsed."""


@dataclass(frozen=True, slots=True)
class Trigger:
    """One ScaledObject trigger's metadata, checked."""

    target: DemandTarget
    slots_per_replica: int


def parse_trigger(metadata: dict[str, str] | Any, limits: ScalerLimits, max_wire_name_length: int) -> Trigger:
    """The trigger ``metadata`` describes; raises InvalidArgument naming the first key
    that is missing or out of bounds. Keys of other tools (KEDA passes the trigger's
    whole metadata, ``scalerAddress`` included) are ignored."""
    queue = metadata.get("queue", "")
    check_name("scalerMetadata.queue", queue)
    return Trigger(
        DemandTarget(
            queue=queue,
            wire_names=_wire_names(metadata.get("wireNames", ""), limits, max_wire_name_length),
            horizon_ms=_number(metadata, "horizonSeconds", 0, 0, limits.max_horizon_s) * 1000,
        ),
        slots_per_replica=_number(metadata, "slotsPerReplica", 1, 1, limits.max_slots_per_replica),
    )


def _wire_names(value: str, limits: ScalerLimits, max_length: int) -> tuple[str, ...]:
    if not value.strip():
        return ()
    # Counted before splitting: a caller's list is never split past the bound.
    if value.count(",") + 1 > limits.max_wire_names:
        raise InvalidArgument(
            "scalerMetadata.wireNames",
            f"names at most {limits.max_wire_names} wire names (max_wire_names)",
            reason="OUT_OF_RANGE",
        )
    names = tuple(dict.fromkeys(name.strip() for name in value.split(",")))
    for name in names:
        check_name("scalerMetadata.wireNames", name, max_length=max_length)
    return names


def _number(metadata: dict[str, str] | Any, key: str, default: int, low: int, high: int) -> int:
    text = metadata.get(key, "").strip()
    if not text:
        return default
    if (
        len(text) > MAX_NUMBER_CHARS
        or not text.isascii()
        or not text.isdigit()
        or not low <= int(text) <= high
    ):
        raise InvalidArgument(
            f"scalerMetadata.{key}",
            f"must be a whole number from {low} to {high}, got {text[:MAX_NUMBER_CHARS]!r}",
            reason="OUT_OF_RANGE",
        )
    return int(text)


class ScalerServicer(pb_grpc.ExternalScalerServicer):
    """IsActive, StreamIsActive, GetMetricSpec and GetMetrics over the facade."""

    def __init__(self, app: Coordinator, limits: ScalerLimits) -> None:
        self.app = app
        self.limits = limits
        self.streams = 0
        """StreamIsActive streams open now."""
        self.reads = 0
        """IsActive and GetMetrics calls reading now."""

    def _trigger(self, ref: pb.ScaledObjectRef) -> Trigger:
        return parse_trigger(ref.scalerMetadata, self.limits, self.app.bounds.max_wire_name_length)

    async def _active(self, target: DemandTarget) -> bool:
        # Whether any job counts is a count capped at 1: an index probe per part, and a
        # leased job answers alone (no weighing of the due ones against the controls).
        return (await self.app.slot_demand(target, cap=1, leased_enough=True)).slots > 0

    async def _bounded_read(self, target: DemandTarget, cap: int, leased_enough: bool = False) -> int:
        """A unary call's read, refused past ``max_concurrent_reads`` at once."""
        if self.reads >= self.limits.max_concurrent_reads:
            raise ResourceExhausted(
                f"{self.reads} scaler calls are reading, the most this port serves at once "
                "(max_concurrent_reads); try again later",
                reason="TOO_MANY_SCALER_CALLS",
                metadata={"limit": self.limits.max_concurrent_reads},
            )
        self.reads += 1
        try:
            return (await self.app.slot_demand(target, cap=cap, leased_enough=leased_enough)).slots
        finally:
            self.reads -= 1

    async def IsActive(self, request: pb.ScaledObjectRef, context: Any) -> pb.IsActiveResponse:
        slots = await self._bounded_read(self._trigger(request).target, cap=1, leased_enough=True)
        return pb.IsActiveResponse(result=slots > 0)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Any) -> pb.GetMetricSpecResponse:
        per_replica = self._trigger(request).slots_per_replica
        spec = pb.MetricSpec(
            metricName=METRIC_NAME, targetSize=per_replica, targetSizeFloat=float(per_replica)
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Any) -> pb.GetMetricsResponse:
        target = self._trigger(request.scaledObjectRef).target
        slots = await self._bounded_read(target, cap=self.limits.max_counted_jobs)
        # KEDA asks by the name it made from ours (with its own prefix): answered as asked.
        value = pb.MetricValue(metricName=request.metricName or METRIC_NAME, metricValue=slots)
        value.metricValueFloat = float(slots)
        return pb.GetMetricsResponse(metricValues=[value])

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.IsActiveResponse]:
        """The answer at once, then each time it changes: an enqueue (here or, through
        PostgreSQL's notifications, on another replica) wakes an inactive stream at once;
        every stream also reads again each ``stream_recheck_interval_s``."""
        try:
            trigger = self._trigger(request)
            if self.streams >= self.limits.max_streams:
                raise ResourceExhausted(
                    f"{self.streams} scaler streams are open, the most this port serves "
                    "(max_streams); use IsActive, or try again later",
                    reason="TOO_MANY_SCALER_STREAMS",
                    metadata={"limit": self.limits.max_streams},
                )
            self.streams += 1
        except CoordinatorError as exc:
            await abort(context, exc)
        try:
            async for active in self._changes(trigger.target):
                yield pb.IsActiveResponse(result=active)
        except CoordinatorError as exc:
            await abort(context, exc)
        finally:
            self.streams -= 1

    async def _changes(self, target: DemandTarget) -> AsyncIterator[bool]:
        arrivals = self.app.arrivals
        last: bool | None = None
        while True:
            ticket = arrivals.ticket()
            active = await self._active(target)
            if active != last:
                yield active
                last = active
            if active:
                # An arrival cannot make an active target inactive: only the clock can
                # tell when its jobs have ended.
                await asyncio.sleep(self.limits.stream_recheck_interval_s)
            else:
                await Arrivals.wait(ticket, self.limits.stream_recheck_interval_s)
                # Arrivals in busy queues wake every stream: reads stay this far apart.
                await asyncio.sleep(self.limits.stream_min_recheck_s)
