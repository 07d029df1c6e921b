"""Run one handler without a coordinator, through the worker's own pipeline.

``run_handler`` decodes the payload, runs middleware and the handler, applies the
execution timeout and cancellation grace, and maps the outcome exactly as a ``Worker``
would; the returned ``HandlerRun`` is what the worker would have reported::

    run = await run_handler(capture, CapturePayment(order_id="o-1"))
    assert run.outcome is Outcome.SUCCEEDED
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from worker_sdk._context import CAUSE_CANCELLED, CancelCause, JobContext
from worker_sdk._jobs import encode_payload, spec_of
from worker_sdk._middleware import Middleware
from worker_sdk._pipeline import HandlerDef, PipelineRun, execute
from worker_sdk._results import Outcome
from worker_sdk._worker import is_async_callable

__all__ = ["HandlerRun", "RawPayload", "run_handler", "run_handler_sync"]

_TEST_JOB_ID = "00000000-0000-7000-8000-000000000001"
_TEST_ATTEMPT_ID = "00000000-0000-7000-8000-000000000002"


@dataclass(frozen=True, slots=True)
class RawPayload:
    """Payload bytes as they would arrive on the wire, to test decoding and upgrades.

    Attributes:
        job_type: The ``@job`` class the payload claims to be.
        data: The encoded payload.
        version: Its payload version; None means the job type's current version.
    """

    job_type: type[Any]
    data: bytes
    version: int | None = None


@dataclass(frozen=True, slots=True)
class HandlerRun:
    """What the worker would have reported for the run.

    ``outcome`` is None when the worker would send no result at all: the handler ignored
    its cancellation past the grace after a timeout (the coordinator then recovers the
    job when the lease lapses, R-7). Empty text fields are None.
    """

    outcome: Outcome | None
    error_code: str | None = None
    exception_type: str | None = None
    message: str | None = None
    detail: str | None = None
    output: bytes | None = None
    retry_delay: timedelta | None = None
    cancel_cause: CancelCause | None = None


async def run_handler(
    handler: Callable[..., Any],
    payload: object,
    *,
    middleware: Sequence[Middleware] = (),
    execution_timeout: timedelta | None = None,
    cancellation_grace: timedelta = timedelta(seconds=10),
    parent_outputs: Mapping[str, bytes] | None = None,
    max_output_bytes: int = 65_536,
    cancel_after: timedelta | None = None,
    execution_number: int = 1,
    max_executions: int = 3,
    job_id: str = _TEST_JOB_ID,
    attempt_id: str = _TEST_ATTEMPT_ID,
) -> HandlerRun:
    """Runs ``handler`` once on ``payload`` through the worker's pipeline.

    Args:
        handler: A sync or async handler ``(job, ctx) -> bytes | None``.
        payload: An instance of a ``@job`` dataclass (encoded and decoded again, as on
            the wire), or a ``RawPayload``.
        middleware: Middleware around the handler, first outermost.
        execution_timeout: The run's timeout; None for none.
        cancellation_grace: How long a cancelled handler may take to return.
        parent_outputs: ``ctx.parent_outputs``.
        max_output_bytes: Larger outputs are reported as ``output_too_large``.
        cancel_after: Simulates a user cancel (R-8) this long after the start.
        execution_number: ``ctx.execution_number``.
        max_executions: ``ctx.max_executions``.
        job_id: ``ctx.job_id``.
        attempt_id: ``ctx.attempt_id``.
    """
    if isinstance(payload, RawPayload):
        spec = spec_of(payload.job_type)
        data, version = payload.data, payload.version if payload.version is not None else spec.version
    else:
        spec, data = encode_payload(payload)
        version = spec.version
    ctx = JobContext(
        job_id=job_id,
        attempt_id=attempt_id,
        wire_name=spec.wire_name,
        queue=spec.queue,
        execution_number=execution_number,
        max_executions=max_executions,
        generation=1,
        parent_outputs=parent_outputs,
    )
    loop = asyncio.get_running_loop()
    cancel_timer = None
    if cancel_after is not None:
        cancel_timer = loop.call_later(cancel_after.total_seconds(), ctx._cancel, CAUSE_CANCELLED)
    executor = ThreadPoolExecutor(1, thread_name_prefix="runwick-test-handler")
    try:
        report = await execute(
            PipelineRun(
                handler=HandlerDef(spec, handler, is_async_callable(handler)),
                ctx=ctx,
                payload=data,
                payload_version=version,
                middleware=tuple(middleware),
                execution_timeout=execution_timeout,
                cancellation_grace=cancellation_grace,
                max_output_bytes=max_output_bytes,
                executor=executor,
            )
        )
    finally:
        if cancel_timer is not None:
            cancel_timer.cancel()
        executor.shutdown(wait=False)
    if report is None:
        return HandlerRun(outcome=None, cancel_cause=ctx.cancel_cause)
    return HandlerRun(
        outcome=report.outcome,
        error_code=report.error_code or None,
        exception_type=report.exception_type or None,
        message=report.message or None,
        detail=report.detail or None,
        output=report.output,
        retry_delay=report.retry_delay,
        cancel_cause=ctx.cancel_cause,
    )


def run_handler_sync(
    handler: Callable[..., Any],
    payload: object,
    *,
    middleware: Sequence[Middleware] = (),
    execution_timeout: timedelta | None = None,
    cancellation_grace: timedelta = timedelta(seconds=10),
    parent_outputs: Mapping[str, bytes] | None = None,
    max_output_bytes: int = 65_536,
    cancel_after: timedelta | None = None,
    execution_number: int = 1,
    max_executions: int = 3,
    job_id: str = _TEST_JOB_ID,
    attempt_id: str = _TEST_ATTEMPT_ID,
) -> HandlerRun:
    """``run_handler`` for code without a running event loop (uses ``asyncio.run``)."""
    return asyncio.run(
        run_handler(
            handler,
            payload,
            middleware=middleware,
            execution_timeout=execution_timeout,
            cancellation_grace=cancellation_grace,
            parent_outputs=parent_outputs,
            max_output_bytes=max_output_bytes,
            cancel_after=cancel_after,
            execution_number=execution_number,
            max_executions=max_executions,
            job_id=job_id,
            attempt_id=attempt_id,
        )
    )
