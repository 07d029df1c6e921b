"""The maintenance loops' cadence: their interval while busy, the idle interval once a
pass found nothing, cut short by a wake-up to one interval from then."""

from __future__ import annotations

import asyncio

from coordinator.scheduler.loop import Cadence

LONG_S = 3600.0
SHORT_S = 0.01


async def test_a_busy_cadence_sleeps_its_interval() -> None:
    cadence = Cadence(SHORT_S, LONG_S)
    assert not await asyncio.wait_for(cadence.sleep(asyncio.Event()), 5)


async def test_an_idle_cadence_sleeps_until_woken_then_one_interval() -> None:
    cadence = Cadence(SHORT_S, LONG_S)
    cadence.idle = True
    sleeping = asyncio.ensure_future(cadence.sleep(asyncio.Event()))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not sleeping.done()

    cadence.wake()
    assert not cadence.idle
    assert not await asyncio.wait_for(sleeping, 5)


async def test_waking_a_busy_cadence_changes_nothing() -> None:
    cadence = Cadence(SHORT_S, LONG_S)
    cadence.wake()
    assert not cadence.idle
    assert not await asyncio.wait_for(cadence.sleep(asyncio.Event()), 5)


async def test_stop_ends_an_idle_sleep() -> None:
    cadence = Cadence(SHORT_S, LONG_S)
    cadence.idle = True
    stop = asyncio.Event()
    sleeping = asyncio.ensure_future(cadence.sleep(stop))
    await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(sleeping, 5)


def test_the_idle_interval_is_never_shorter_than_the_interval() -> None:
    assert Cadence(10.0, 1.0).idle_interval_s == 10.0
