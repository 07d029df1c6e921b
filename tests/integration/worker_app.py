"""The job types and handlers that integration tests run in real worker processes.

Started with ``runwick worker tests.integration.worker_app:worker``; settings come from
the environment so each test can shorten leases and graces.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from worker_sdk import JobContext, PermanentJobFailure, Worker, job


def _ms(name: str, default: int) -> timedelta:
    return timedelta(milliseconds=int(os.environ.get(name, default)))


worker = Worker(
    os.environ.get("RUNWICK_TARGET", "127.0.0.1:7233"),
    token=os.environ.get("RUNWICK_TOKEN") or None,
    queues=["default"],
    concurrency=int(os.environ.get("TEST_CONCURRENCY", "4")),
    lease=_ms("TEST_LEASE_MS", 60_000),
    heartbeat_interval=_ms("TEST_HEARTBEAT_MS", 200),
    drain_timeout=_ms("TEST_DRAIN_MS", 5_000),
    cancellation_grace=_ms("TEST_GRACE_MS", 10_000),
    metrics_port=int(os.environ["TEST_METRICS_PORT"]) if "TEST_METRICS_PORT" in os.environ else None,
    metrics_host="127.0.0.1",
)


@job("tests.echo")
@dataclass
class Echo:
    text: str


@job("tests.always_fails")
@dataclass
class AlwaysFails:
    note: str = ""


@job("tests.permanent")
@dataclass
class Permanent:
    order_id: str


@job("tests.cooperative_sleep")
@dataclass
class CooperativeSleep:
    seconds: float


@job("tests.stubborn_sleep")
@dataclass
class StubbornSleep:
    """Ignores cancellation on its first execution; succeeds on later ones."""

    seconds: float


@job("tests.block_until")
@dataclass
class BlockUntil:
    """Writes ``started_file`` then waits until ``release_file`` exists (or cancellation)."""

    started_file: str
    release_file: str


@job("tests.fails_until_file")
@dataclass
class FailsUntilFile:
    """Fails (retryably) while ``path`` does not exist, then succeeds."""

    path: str


class InventoryError(Exception):
    pass


@worker.handler(Echo)
async def echo(payload: Echo, ctx: JobContext) -> bytes:
    return f"{payload.text} (execution {ctx.execution_number})".encode()


@worker.handler(AlwaysFails)
def always_fails(payload: AlwaysFails, ctx: JobContext) -> None:
    raise InventoryError(f"secret-ish detail for execution {ctx.execution_number}")


@worker.handler(Permanent)
async def permanent(payload: Permanent, ctx: JobContext) -> None:
    raise PermanentJobFailure("order_not_found", f"Order {payload.order_id} does not exist.")


@worker.handler(CooperativeSleep)
async def cooperative_sleep(payload: CooperativeSleep, ctx: JobContext) -> bytes:
    try:
        await asyncio.wait_for(ctx.wait_cancelled(), payload.seconds)
    except TimeoutError:
        return b"slept"
    return b"noticed cancellation"


@worker.handler(StubbornSleep)
def stubborn_sleep(payload: StubbornSleep, ctx: JobContext) -> bytes:
    if ctx.execution_number == 1:
        time.sleep(payload.seconds)  # deliberately deaf to ctx.cancelled
    return b"done"


@worker.handler(BlockUntil)
async def block_until(payload: BlockUntil, ctx: JobContext) -> bytes:
    Path(payload.started_file).write_text(ctx.attempt_id)
    while not Path(payload.release_file).exists():
        if ctx.cancelled:
            return b"stopped early"
        await asyncio.sleep(0.02)
    return b"released"


@worker.handler(FailsUntilFile)
async def fails_until_file(payload: FailsUntilFile, ctx: JobContext) -> bytes:
    if not Path(payload.path).exists():
        raise InventoryError(f"{payload.path} is missing (execution {ctx.execution_number})")
    return f"found it in generation {ctx.generation}".encode()


@job("tests.step")
@dataclass
class Step:
    """One step of a workflow: returns its name and what its parents returned; with
    ``fail_unless`` set, fails permanently while that file does not exist."""

    name: str
    fail_unless: str = ""


@worker.handler(Step)
async def step(payload: Step, ctx: JobContext) -> bytes:
    if payload.fail_unless and not Path(payload.fail_unless).exists():
        raise PermanentJobFailure("step_failed", f"{payload.name}: {payload.fail_unless} is missing")
    inputs = sorted(output.decode() for output in ctx.parent_outputs.values())
    return f"{payload.name}({','.join(inputs)})".encode()


class WarehouseReservationServiceTemporarilyUnavailableBecauseTheUpstreamInventoryTimedOut(Exception):
    """An exception with a long name, for the dashboard's layout tests."""


@job("tests.inventory.reservations.reserve_every_item_of_an_order_in_the_nearest_warehouse")
@dataclass
class LongNamedFailure:
    """Fails (retryably) with a long exception type; its wire name is long too."""

    order_id: str


@worker.handler(LongNamedFailure)
async def long_named_failure(payload: LongNamedFailure, ctx: JobContext) -> None:
    raise WarehouseReservationServiceTemporarilyUnavailableBecauseTheUpstreamInventoryTimedOut(
        f"order {payload.order_id}: the inventory service did not answer"
    )
