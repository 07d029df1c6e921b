"""The worker process of the chaos suite: ``runwick worker tests.chaos.worker_app:worker``.

Its handlers record what they did as JSON lines appended to ``CHAOS_HISTORY`` (one file
per process, plain ``os.write`` on an ``O_APPEND`` descriptor: nothing buffered in the
process, no fsync; a kill -9 can at worst cut the line being written, which the checker
tolerates). Recorded: each handler call (job, attempt, execution number, generation),
how it ended, and every ``ResultAck`` the worker receives (through a tap on the SDK's
engine, since no public hook reports acknowledgements).

Settings come from the environment (``CHAOS_*``), set by the harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import timedelta

from tests.chaos.history import encode_event
from tests.chaos.jobs import Fragile, Task, output_for
from worker_sdk import JobContext, PermanentJobFailure, Worker
from worker_sdk import _engine as sdk_engine
from worker_sdk.proto.runwick.v1 import job_pb2
from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

WORKER_ID = os.environ["CHAOS_WORKER_ID"]
_FD = os.open(os.environ["CHAOS_HISTORY"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def record(kind: str, **fields: object) -> None:
    """Appends one event line (safe from the loop and from handler threads)."""
    event = {"kind": kind, "wall": time.time() * 1000, "mono": time.monotonic(), "worker_id": WORKER_ID}
    os.write(_FD, encode_event({**event, **fields}))


def _ms(name: str, default: int) -> timedelta:
    return timedelta(milliseconds=int(os.environ.get(name, default)))


worker = Worker(
    os.environ["RUNWICK_TARGET"],
    worker_id=WORKER_ID,
    concurrency=int(os.environ.get("CHAOS_CONCURRENCY", "4")),
    lease=_ms("CHAOS_LEASE_MS", 2_000),
    drain_timeout=_ms("CHAOS_DRAIN_MS", 1_000),
    cancellation_grace=_ms("CHAOS_GRACE_MS", 1_000),
    ack_timeout=_ms("CHAOS_ACK_TIMEOUT_MS", 2_000),
    hello_timeout=_ms("CHAOS_HELLO_TIMEOUT_MS", 3_000),
    reconnect_initial_delay=timedelta(milliseconds=50),
    reconnect_max_delay=timedelta(seconds=1),
)


class ChaosError(Exception):
    """The retryable failure the workload asks for."""


def _started(ctx: JobContext) -> None:
    record(
        "start",
        job=ctx.job_id,
        attempt=ctx.attempt_id,
        execution=ctx.execution_number,
        generation=ctx.generation,
        max_executions=ctx.max_executions,
        wire_name=ctx.wire_name,
    )


def _end(payload: Task | Fragile, ctx: JobContext) -> bytes:
    """Records how the run ends and ends it that way."""
    ids = {"job": ctx.job_id, "attempt": ctx.attempt_id}
    if ctx.cancelled:
        record("finish", **ids, result="cancelled", cause=ctx.cancel_cause)
        ctx.raise_if_cancelled()
    if payload.permanent:
        record("finish", **ids, result="raised", error="permanent")
        raise PermanentJobFailure("chaos_permanent", f"{payload.key} fails for good")
    if ctx.execution_number <= payload.fail_executions:
        record("finish", **ids, result="raised", error="retryable")
        raise ChaosError(f"{payload.key} fails on execution {ctx.execution_number}")
    output = output_for(ctx.attempt_id, payload.key)
    record("finish", **ids, result="returned", output=output.decode())
    return output


@worker.handler(Task)
async def run_task(payload: Task, ctx: JobContext) -> bytes:
    _started(ctx)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ctx.wait_cancelled(), payload.sleep_ms / 1000)
    return _end(payload, ctx)


@worker.handler(Fragile)
def run_fragile(payload: Fragile, ctx: JobContext) -> bytes:
    """A plain ``def`` handler: runs on the worker's thread pool, polls ``ctx.cancelled``."""
    _started(ctx)
    deadline = time.monotonic() + payload.sleep_ms / 1000
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    return _end(payload, ctx)


def _name(enum_name: str, prefix: str) -> str:
    return enum_name.removeprefix(prefix).lower()


# The tap: every ResultAck, with the outcome this worker reported for that attempt.
_on_result_ack = getattr(sdk_engine.Engine, "_on_result_ack", None)
if _on_result_ack is None:  # fail loudly: without it the success checks lose their worker side
    raise RuntimeError("worker_sdk._engine.Engine._on_result_ack is gone: update the chaos ack tap")


def _tapped_on_result_ack(self: sdk_engine.Engine, ack: pb.ResultAck) -> None:
    sent = self.table.unacked.get(ack.attempt_id)
    record(
        "ack",
        attempt=ack.attempt_id,
        status=_name(pb.ResultAck.Status.Name(ack.status), "STATUS_"),
        outcome=_name(job_pb2.Outcome.Name(sent.result.outcome), "OUTCOME_") if sent is not None else None,
        job_state=_name(job_pb2.JobState.Name(ack.job_state), "JOB_STATE_"),
        reason=ack.reason or None,
    )
    assert _on_result_ack is not None
    _on_result_ack(self, ack)


sdk_engine.Engine._on_result_ack = _tapped_on_result_ack  # type: ignore[method-assign]
