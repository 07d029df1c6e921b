"""The run pipeline through ``worker_sdk.testing`` (R-5, R-6, R-7, R-8)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

from worker_sdk import (
    CallNext,
    Failed,
    JobContext,
    JobResult,
    Outcome,
    PermanentJobFailure,
    Retry,
    Success,
    job,
)
from worker_sdk.testing import RawPayload, run_handler, run_handler_sync

SHORT = timedelta(milliseconds=50)
GRACE = timedelta(milliseconds=100)


@job("reports.build")
@dataclass
class BuildReport:
    name: str


class RateLimited(Exception):
    code = "rate_limited"


class WeirdCode(Exception):
    code = "has spaces!"


# A class name outside ASCII: its code must still follow the name grammar.
NonAscii = type("Ünicode", (Exception,), {"__module__": __name__})


async def echo(job: BuildReport, ctx: JobContext) -> bytes:
    return job.name.encode()


async def test_return_is_succeeded_with_output() -> None:
    run = await run_handler(echo, BuildReport("q3"))
    assert (run.outcome, run.output, run.error_code) == (Outcome.SUCCEEDED, b"q3", None)


async def test_returning_none_succeeds_without_output() -> None:
    async def nothing(job: BuildReport, ctx: JobContext) -> None:
        return None

    run = await run_handler(nothing, BuildReport("q3"))
    assert (run.outcome, run.output) == (Outcome.SUCCEEDED, None)


async def test_sync_handlers_run_on_a_thread() -> None:
    seen: list[str] = []

    def sync_handler(job: BuildReport, ctx: JobContext) -> bytes:
        seen.append(threading.current_thread().name)
        return b"done"

    run = await run_handler(sync_handler, BuildReport("q3"))
    assert (run.outcome, run.output) == (Outcome.SUCCEEDED, b"done")
    assert seen[0] != threading.main_thread().name


def test_run_handler_sync_needs_no_loop() -> None:
    assert run_handler_sync(echo, BuildReport("x")).output == b"x"


async def test_context_carries_the_run() -> None:
    captured: list[JobContext] = []

    async def capture(job: BuildReport, ctx: JobContext) -> None:
        captured.append(ctx)

    await run_handler(
        capture, BuildReport("x"), parent_outputs={"p-1": b"out"}, execution_number=2, max_executions=4
    )
    ctx = captured[0]
    assert (ctx.wire_name, ctx.queue, ctx.execution_number, ctx.max_executions) == (
        "reports.build",
        "default",
        2,
        4,
    )
    assert dict(ctx.parent_outputs) == {"p-1": b"out"}
    assert not ctx.cancelled and ctx.cancel_cause is None


async def test_exception_is_retryable_with_class_name_type_message_and_traceback() -> None:
    async def fails(job: BuildReport, ctx: JobContext) -> None:
        raise KeyError("order 17")

    run = await run_handler(fails, BuildReport("x"))
    assert run.outcome is Outcome.RETRYABLE_FAILURE
    assert (run.error_code, run.exception_type, run.message) == ("KeyError", "KeyError", "'order 17'")
    assert run.detail is not None and "Traceback" in run.detail and "order 17" in run.detail


@pytest.mark.parametrize(
    ("error", "code", "exception_type"),
    [
        (RateLimited(), "rate_limited", f"{__name__}.RateLimited"),
        (WeirdCode(), "WeirdCode", f"{__name__}.WeirdCode"),
        (NonAscii(), "_nicode", f"{__name__}.Ünicode"),
    ],
)
async def test_exception_code_is_its_code_attribute_or_class_name(
    error: Exception, code: str, exception_type: str
) -> None:
    async def fails(job: BuildReport, ctx: JobContext) -> None:
        raise error

    run = await run_handler(fails, BuildReport("x"))
    assert (run.outcome, run.error_code, run.exception_type) == (
        Outcome.RETRYABLE_FAILURE,
        code,
        exception_type,
    )


async def test_permanent_job_failure_is_permanent_with_its_code() -> None:
    def fails(job: BuildReport, ctx: JobContext) -> None:
        raise PermanentJobFailure("order_not_found", "Order 17 does not exist.")

    run = await run_handler(fails, BuildReport("x"))
    assert (run.outcome, run.error_code, run.message) == (
        Outcome.PERMANENT_FAILURE,
        "order_not_found",
        "Order 17 does not exist.",
    )
    assert run.exception_type == "worker_sdk._errors.PermanentJobFailure"


class RetryOn:
    """Middleware turning RateLimited into Retry(reason, delay)."""

    def __init__(self, delay: timedelta | None) -> None:
        self.delay = delay

    async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
        try:
            return await call_next()
        except RateLimited:
            return Retry("rate_limited", self.delay)


async def rate_limited(job: BuildReport, ctx: JobContext) -> None:
    raise RateLimited()


@pytest.mark.parametrize(
    "delay", [timedelta(minutes=2), None, timedelta(seconds=-1)], ids=["delay", "no-delay", "negative"]
)
async def test_middleware_retry_is_retryable_with_its_delay(delay: timedelta | None) -> None:
    run = await run_handler(rate_limited, BuildReport("x"), middleware=[RetryOn(delay)])
    assert (run.outcome, run.error_code, run.retry_delay) == (
        Outcome.RETRYABLE_FAILURE,
        "rate_limited",
        delay,
    )
    assert run.exception_type is None


async def test_middleware_failed_is_permanent_with_truncated_message() -> None:
    class Reject:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            return Failed("bad_request", "é" * 600)

    run = await run_handler(echo, BuildReport("x"), middleware=[Reject()])
    assert (run.outcome, run.error_code) == (Outcome.PERMANENT_FAILURE, "bad_request")
    assert run.message is not None and len(run.message.encode()) <= 1024


async def test_middleware_runs_outermost_first_around_the_handler() -> None:
    order: list[str] = []

    class Tag:
        def __init__(self, name: str) -> None:
            self.name = name

        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            order.append(f"{self.name}>")
            result = await call_next()
            order.append(f"<{self.name}")
            return result

    async def handler(job: BuildReport, ctx: JobContext) -> bytes:
        order.append("handler")
        return b"ok"

    run = await run_handler(handler, BuildReport("x"), middleware=[Tag("outer"), Tag("inner")])
    assert run.output == b"ok"
    assert order == ["outer>", "inner>", "handler", "<inner", "<outer"]


async def test_middleware_can_replace_the_output() -> None:
    class Wrap:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            result = await call_next()
            assert isinstance(result, Success)
            return Success(b"[" + (result.output or b"") + b"]")

    run = await run_handler(echo, BuildReport("x"), middleware=[Wrap()])
    assert run.output == b"[x]"


async def test_middleware_returning_garbage_is_an_exception_outcome() -> None:
    class Garbage:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            return "ok"  # type: ignore[return-value]

    run = await run_handler(echo, BuildReport("x"), middleware=[Garbage()])
    assert (run.outcome, run.error_code) == (Outcome.RETRYABLE_FAILURE, "TypeError")


async def test_output_over_the_limit_is_output_too_large_without_output() -> None:
    async def big(job: BuildReport, ctx: JobContext) -> bytes:
        return b"x" * 11

    run = await run_handler(big, BuildReport("x"), max_output_bytes=10)
    assert (run.outcome, run.error_code, run.output) == (Outcome.PERMANENT_FAILURE, "output_too_large", None)
    assert (await run_handler(big, BuildReport("x"), max_output_bytes=11)).output == b"x" * 11


async def test_handler_returning_a_str_is_an_exception_outcome() -> None:
    async def wrong(job: BuildReport, ctx: JobContext) -> str:
        return "text"

    run = await run_handler(wrong, BuildReport("x"))
    assert (run.outcome, run.error_code) == (Outcome.RETRYABLE_FAILURE, "TypeError")


async def test_undecodable_payload_is_permanent_and_skips_middleware_and_handler() -> None:
    called: list[str] = []

    class Spy:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            called.append("middleware")
            return await call_next()

    run = await run_handler(echo, RawPayload(BuildReport, b'{"title": "x"}'), middleware=[Spy()])
    assert (run.outcome, run.error_code) == (Outcome.PERMANENT_FAILURE, "payload_undecodable")
    assert called == []


async def test_timeout_with_a_cooperative_handler_is_timed_out_even_if_it_returns() -> None:
    async def cooperative(job: BuildReport, ctx: JobContext) -> bytes:
        await ctx.wait_cancelled()
        return b"finished anyway"

    run = await run_handler(cooperative, BuildReport("x"), execution_timeout=SHORT, cancellation_grace=GRACE)
    assert (run.outcome, run.error_code, run.output, run.cancel_cause) == (
        Outcome.TIMED_OUT,
        "timeout",
        None,
        "timeout",
    )


async def test_timeout_with_a_sync_handler_polling_the_token() -> None:
    def polling(job: BuildReport, ctx: JobContext) -> None:
        while not ctx.cancelled:
            time.sleep(0.005)
        ctx.raise_if_cancelled()

    run = await run_handler(polling, BuildReport("x"), execution_timeout=SHORT, cancellation_grace=GRACE)
    assert (run.outcome, run.error_code) == (Outcome.TIMED_OUT, "timeout")


async def test_timeout_clock_covers_middleware() -> None:
    class Slow:
        async def __call__(self, ctx: JobContext, call_next: CallNext) -> JobResult:
            await ctx.wait_cancelled()
            return await call_next()

    run = await run_handler(echo, BuildReport("x"), middleware=[Slow()], execution_timeout=SHORT)
    assert run.outcome is Outcome.TIMED_OUT


async def test_timeout_with_a_handler_ignoring_cancellation_sends_no_result_after_the_grace() -> None:
    release = asyncio.Event()

    async def stubborn(job: BuildReport, ctx: JobContext) -> bytes:
        await release.wait()
        return b"too late"

    started = time.monotonic()
    run = await run_handler(stubborn, BuildReport("x"), execution_timeout=SHORT, cancellation_grace=GRACE)
    elapsed = time.monotonic() - started
    release.set()
    assert run.outcome is None and run.cancel_cause == "timeout"
    assert elapsed >= (SHORT + GRACE).total_seconds() * 0.9


async def test_fast_handler_is_unaffected_by_its_timeout() -> None:
    run = await run_handler(echo, BuildReport("x"), execution_timeout=timedelta(seconds=5))
    assert run.outcome is Outcome.SUCCEEDED


async def test_user_cancel_is_cancelled() -> None:
    async def cooperative(job: BuildReport, ctx: JobContext) -> None:
        await ctx.wait_cancelled()
        ctx.raise_if_cancelled()

    run = await run_handler(cooperative, BuildReport("x"), cancel_after=timedelta(milliseconds=20))
    assert (run.outcome, run.error_code, run.cancel_cause) == (Outcome.CANCELLED, "cancelled", "cancelled")


async def test_wait_cancelled_returns_at_once_once_cancelled_and_wakes_every_waiter() -> None:
    ctx = JobContext(
        job_id="j",
        attempt_id="a",
        wire_name="reports.build",
        queue="q",
        execution_number=1,
        max_executions=1,
        generation=1,
    )
    waiting = [asyncio.ensure_future(ctx.wait_cancelled()) for _ in range(2)]
    await asyncio.sleep(0)
    assert not any(waiter.done() for waiter in waiting)
    ctx._cancel("cancelled")
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=1)
    await asyncio.wait_for(ctx.wait_cancelled(), timeout=1)  # cancelled already: no wait
