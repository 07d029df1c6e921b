"""The worker's virtual timers (``worker_sdk._timers``) on a fake clock, and the run
pipeline's execution timeout and cancellation grace driven by them."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from worker_sdk import JobContext, Outcome, job
from worker_sdk._jobs import encode_payload
from worker_sdk._pipeline import HandlerDef, PipelineRun, RunReport, execute
from worker_sdk._timers import VirtualTimers


class FakeMilliseconds:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_767_225_600_000

    def __call__(self) -> int:
        return self.now


@job("tests.timers.wait")
@dataclass
class Wait:
    name: str


async def settle() -> None:
    """Lets every task woken so far run its next step."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_sleep_ends_only_when_fired_at_or_after_its_deadline() -> None:
    clock = FakeMilliseconds()
    timers = VirtualTimers(clock)
    sleeping = asyncio.ensure_future(timers.sleep(30, "timeout"))
    await settle()
    assert timers.next_deadline_ms(frozenset({"timeout"})) == clock.now + 30_000
    assert timers.monotonic() == clock.now / 1000

    clock.now += 29_999
    assert timers.fire_due() == 0
    await settle()
    assert not sleeping.done()

    clock.now += 1
    assert timers.fire_due() == 1
    await settle()
    assert sleeping.done() and timers.next_deadline_ms(frozenset({"timeout"})) is None


async def test_a_wait_is_rounded_up_to_a_whole_millisecond() -> None:
    clock = FakeMilliseconds()
    timers = VirtualTimers(clock)
    sleeping = asyncio.ensure_future(timers.sleep(0.0101, "heartbeat"))
    exact = asyncio.ensure_future(timers.sleep(4.07, "timeout"))  # 4070.0000000000005 ms in floats
    await settle()
    assert timers.next_deadline_ms(frozenset({"heartbeat"})) == clock.now + 11
    assert timers.next_deadline_ms(frozenset({"timeout"})) == clock.now + 4070
    sleeping.cancel()
    exact.cancel()


async def test_deadlines_are_found_by_purpose_and_cancelled_sleeps_are_forgotten() -> None:
    clock = FakeMilliseconds()
    timers = VirtualTimers(clock)
    heartbeat = asyncio.ensure_future(timers.sleep(20, "heartbeat"))
    grace = asyncio.ensure_future(timers.sleep(10, "grace"))
    await settle()
    assert timers.next_deadline_ms(frozenset({"timeout", "heartbeat"})) == clock.now + 20_000
    assert timers.next_deadline_ms(frozenset({"grace", "heartbeat"})) == clock.now + 10_000

    grace.cancel()
    await settle()
    assert timers.next_deadline_ms(frozenset({"grace"})) is None
    heartbeat.cancel()


async def test_release_all_wakes_every_sleep_and_later_ones_return_at_once() -> None:
    timers = VirtualTimers(FakeMilliseconds())
    sleeping = [asyncio.ensure_future(timers.sleep(s, "timeout")) for s in (1, 60, 3600)]
    await settle()
    timers.release_all()
    await settle()
    assert all(s.done() for s in sleeping)
    await asyncio.wait_for(timers.sleep(3600, "grace"), timeout=1)  # no virtual wait any more


def waiting_run(timers: VirtualTimers, timeout: timedelta, *, ignores_cancel: bool) -> PipelineRun:
    never = asyncio.Event()

    async def handler(payload: Wait, ctx: JobContext) -> None:
        await (never.wait() if ignores_cancel else ctx.wait_cancelled())

    spec, data = encode_payload(Wait("w"))
    ctx = JobContext(
        job_id="00000000-0000-7000-8000-000000000001",
        attempt_id="00000000-0000-7000-8000-000000000002",
        wire_name=spec.wire_name,
        queue=spec.queue,
        execution_number=1,
        max_executions=3,
        generation=1,
    )
    return PipelineRun(
        handler=HandlerDef(spec, handler, True),
        ctx=ctx,
        payload=data,
        payload_version=spec.version,
        middleware=(),
        execution_timeout=timeout,
        cancellation_grace=timedelta(seconds=10),
        max_output_bytes=1024,
        executor=None,
        timers=timers,
    )


async def test_the_execution_timeout_fires_when_the_virtual_clock_passes_it() -> None:
    clock = FakeMilliseconds()
    timers = VirtualTimers(clock)
    running = asyncio.ensure_future(execute(waiting_run(timers, timedelta(seconds=30), ignores_cancel=False)))
    await settle()
    clock.now += 29_000
    timers.fire_due()
    await settle()
    assert not running.done()

    clock.now += 1_000
    timers.fire_due()
    report = await asyncio.wait_for(running, timeout=5)
    assert isinstance(report, RunReport) and report.outcome is Outcome.TIMED_OUT


async def test_a_handler_ignoring_its_timeout_is_given_up_after_the_virtual_grace() -> None:
    clock = FakeMilliseconds()
    timers = VirtualTimers(clock)
    running = asyncio.ensure_future(execute(waiting_run(timers, timedelta(seconds=30), ignores_cancel=True)))
    await settle()
    clock.now += 30_000
    timers.fire_due()
    await settle()
    assert not running.done()  # cancelled, within its grace

    clock.now += 10_000
    timers.fire_due()
    assert await asyncio.wait_for(running, timeout=5) is None  # no result: the lease decides
