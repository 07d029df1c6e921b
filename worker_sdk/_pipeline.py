"""The run pipeline: decode the payload, run the middleware chain and the handler, and
map what happened to the report the worker sends (R-5, R-6, R-7).

The same code serves the ``Worker`` and ``worker_sdk.testing``. The execution timeout
clock starts when ``execute`` is called and covers decoding, middleware and handler.
Once a run is cancelled (timeout, user cancel, shutdown, lost), the cause decides the
outcome, whatever the handler then does; a handler that does not finish within the
cancellation grace is left running and reported by cause (timeout and lost: no report).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from worker_sdk._context import (
    CAUSE_CANCELLED,
    CAUSE_LOST,
    CAUSE_SHUTDOWN,
    CAUSE_TIMEOUT,
    CancelCause,
    JobContext,
)
from worker_sdk._errors import PayloadUndecodable, PermanentJobFailure
from worker_sdk._jobs import JobSpec, decode_payload
from worker_sdk._middleware import Middleware, build_chain
from worker_sdk._results import JobResult, Outcome, Retry, Success
from worker_sdk._timers import REAL_TIMERS, Timers
from worker_sdk.grammar import (
    MAX_FAILURE_DETAIL_BYTES,
    MAX_FAILURE_MESSAGE_BYTES,
    TRUNCATION_MARKER,
    coerce_code,
    is_valid_code,
    truncate_utf8,
)

logger = logging.getLogger(__name__)

CODE_TIMEOUT = "timeout"
CODE_CANCELLED = "cancelled"
CODE_WORKER_SHUTDOWN = "worker_shutdown"
CODE_PAYLOAD_UNDECODABLE = "payload_undecodable"
CODE_OUTPUT_TOO_LARGE = "output_too_large"


@dataclass(frozen=True, slots=True)
class HandlerDef:
    """A registered handler and the job type it serves."""

    spec: JobSpec
    fn: Callable[..., Any]
    is_async: bool


@dataclass(frozen=True, slots=True)
class RunReport:
    """What the worker reports for one run (a Result without the attempt ID)."""

    outcome: Outcome
    error_code: str = ""
    exception_type: str = ""
    message: str = ""
    detail: str = ""
    output: bytes | None = None
    retry_delay: timedelta | None = None


@dataclass(frozen=True, slots=True)
class PipelineRun:
    """Everything one run of the pipeline needs."""

    handler: HandlerDef
    ctx: JobContext
    payload: bytes
    payload_version: int
    middleware: Sequence[Middleware]
    execution_timeout: timedelta | None
    cancellation_grace: timedelta
    max_output_bytes: int
    executor: Executor | None
    """Where sync handlers run; None uses the loop's default executor."""
    timers: Timers = REAL_TIMERS
    """The clock of the execution timeout and the cancellation grace (a test
    coordinator's virtual one, or the real one)."""


class _Finish:
    """The cancel cause seen when the chain finished, if it did."""

    cause: CancelCause | None = None


async def execute(run: PipelineRun) -> RunReport | None:
    """Runs the pipeline once; returns the report, or None when no result must be sent.

    None means the coordinator has to recover the attempt itself: the attempt was lost,
    or the handler ignored a timeout's cancellation past the grace (R-7).
    """
    ctx = run.ctx
    if ctx.cancel_cause is not None:
        return _report_for_cause(run, ctx.cancel_cause)
    finish = _Finish()
    work = asyncio.ensure_future(_guarded_chain(run, finish))
    waiter = ctx._cancelled_future()
    try:
        timeout_s = None if run.execution_timeout is None else run.execution_timeout.total_seconds()
        await run.timers.wait_first({work, waiter}, timeout_s, "timeout")
        if not work.done():
            if ctx._cancel(CAUSE_TIMEOUT):
                logger.info("job %s attempt %s hit its execution timeout", ctx.job_id, ctx.attempt_id)
            await run.timers.wait_first({work}, run.cancellation_grace.total_seconds(), "grace")
    except asyncio.CancelledError:
        work.cancel()
        raise
    finally:
        waiter.cancel()
    if not work.done():
        work.add_done_callback(_log_late_finish)
        return _unfinished(run, ctx.cancel_cause or CAUSE_TIMEOUT)
    if finish.cause is not None:
        _consume(work)
        return _report_for_cause(run, finish.cause)
    try:
        result = work.result()
    except (Exception, asyncio.CancelledError) as error:
        return report_exception(error)
    return _report_result(result, run.max_output_bytes)


async def _guarded_chain(run: PipelineRun, finish: _Finish) -> JobResult:
    try:
        return await _chain(run)
    finally:
        finish.cause = run.ctx.cancel_cause


async def _chain(run: PipelineRun) -> JobResult:
    handler = run.handler
    payload = decode_payload(handler.spec, run.payload, run.payload_version)

    async def call_handler() -> JobResult:
        if handler.is_async:
            output = await handler.fn(payload, run.ctx)
        else:
            loop = asyncio.get_running_loop()
            call = contextvars.copy_context().run
            output = await loop.run_in_executor(run.executor, call, handler.fn, payload, run.ctx)
        if inspect.isawaitable(output):
            output = await output
        return Success(_as_output(output))

    return await build_chain(run.middleware, run.ctx, call_handler)()


def _as_output(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"handler returned {type(value).__name__}; return bytes or None")


def _report_result(result: JobResult, max_output_bytes: int) -> RunReport:
    if isinstance(result, Success):
        output = result.output
        if output is not None and len(output) > max_output_bytes:
            return RunReport(
                Outcome.PERMANENT_FAILURE,
                error_code=CODE_OUTPUT_TOO_LARGE,
                message=f"output is {len(output)} bytes; the limit is {max_output_bytes} bytes",
            )
        return RunReport(Outcome.SUCCEEDED, output=output or None)
    if isinstance(result, Retry):
        return RunReport(
            Outcome.RETRYABLE_FAILURE,
            error_code=coerce_code(result.reason, "retry"),
            message=truncate_utf8(result.reason, MAX_FAILURE_MESSAGE_BYTES),
            retry_delay=result.delay,
        )
    return RunReport(
        Outcome.PERMANENT_FAILURE,
        error_code=coerce_code(result.code, "failed"),
        message=truncate_utf8(result.message, MAX_FAILURE_MESSAGE_BYTES),
    )


def report_exception(error: BaseException) -> RunReport:
    """Maps an exception out of the chain to its report (R-5)."""
    if isinstance(error, PayloadUndecodable):
        outcome, code = Outcome.PERMANENT_FAILURE, CODE_PAYLOAD_UNDECODABLE
        message = _safe_str(error)
    elif isinstance(error, PermanentJobFailure):
        outcome, code = Outcome.PERMANENT_FAILURE, coerce_code(str(error.code), "permanent_failure")
        message = error.message
    else:
        outcome, code = Outcome.RETRYABLE_FAILURE, exception_code(error)
        message = _safe_str(error)
    return RunReport(
        outcome,
        error_code=code,
        exception_type=qualified_name(type(error)),
        message=truncate_utf8(message, MAX_FAILURE_MESSAGE_BYTES),
        detail=truncate_utf8(_format(error), MAX_FAILURE_DETAIL_BYTES, TRUNCATION_MARKER),
    )


def exception_code(error: BaseException) -> str:
    """The code an exception carries (a valid ``code`` attribute), else its class name."""
    code = getattr(error, "code", None)
    if isinstance(code, str) and is_valid_code(code):
        return code
    return coerce_code(type(error).__name__, "error")


def qualified_name(cls: type) -> str:
    """``module.QualName``, without the module for builtins."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _safe_str(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:
        return f"<unprintable {type(error).__name__}>"


def _format(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(error))
    except Exception:
        return f"<unformattable {type(error).__name__}>"


def _report_for_cause(run: PipelineRun, cause: CancelCause) -> RunReport | None:
    if cause == CAUSE_LOST:
        return None
    if cause == CAUSE_CANCELLED:
        return RunReport(Outcome.CANCELLED, error_code=CODE_CANCELLED, message="cancelled by request")
    if cause == CAUSE_SHUTDOWN:
        return RunReport(Outcome.INTERRUPTED, error_code=CODE_WORKER_SHUTDOWN, message="worker shut down")
    timeout = run.execution_timeout or timedelta(0)
    return RunReport(
        Outcome.TIMED_OUT,
        error_code=CODE_TIMEOUT,
        message=f"execution timeout of {timeout // timedelta(milliseconds=1)} ms exceeded",
    )


def _unfinished(run: PipelineRun, cause: CancelCause) -> RunReport | None:
    ctx = run.ctx
    if cause in (CAUSE_TIMEOUT, CAUSE_LOST):
        logger.warning(
            "job %s attempt %s: handler still running %.3f s after cancellation (%s); "
            "sending no result, the coordinator recovers the job when the lease lapses",
            ctx.job_id,
            ctx.attempt_id,
            run.cancellation_grace.total_seconds(),
            cause,
        )
        return None
    logger.warning(
        "job %s attempt %s: handler still running %.3f s after cancellation (%s); reporting it anyway",
        ctx.job_id,
        ctx.attempt_id,
        run.cancellation_grace.total_seconds(),
        cause,
    )
    return _report_for_cause(run, cause)


def _consume(work: asyncio.Future[Any]) -> None:
    if not work.cancelled() and work.exception() is not None:
        logger.debug("handler raised after its run was cancelled", exc_info=work.exception())


def _log_late_finish(work: asyncio.Future[Any]) -> None:
    if work.cancelled():
        return
    logger.debug("abandoned handler finished late", exc_info=work.exception())
