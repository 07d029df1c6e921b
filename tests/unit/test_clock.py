"""R-13: the one injected clock. The fake moves only when told to, and only forwards."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from coordinator.domain.clock import (
    Clock,
    ClockSample,
    FakeClock,
    OffsetClock,
    SystemClock,
    offset_from_samples,
)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def test_r13_fake_clock_starts_at_2026_by_default() -> None:
    start = FakeClock().now_ms()
    assert datetime.fromtimestamp(start / 1000, tz=UTC) == datetime(2026, 1, 1, tzinfo=UTC)


def test_r13_fake_clock_starts_where_told() -> None:
    assert FakeClock(start_ms=42).now_ms() == 42


def test_r13_fake_clock_stands_still_until_advanced() -> None:
    clock = FakeClock(start_ms=1_000)
    assert [clock.now_ms() for _ in range(5)] == [1_000] * 5


def test_r13_fake_clock_advance_moves_forward_and_returns_the_new_time() -> None:
    clock = FakeClock(start_ms=1_000)
    assert clock.advance(60_000) == 61_000
    assert clock.now_ms() == 61_000
    assert clock.advance(1) == 61_001
    assert clock.now_ms() == 61_001


def test_r13_fake_clock_advance_by_zero_is_allowed() -> None:
    clock = FakeClock(start_ms=5)
    assert clock.advance(0) == 5
    assert clock.now_ms() == 5


@pytest.mark.parametrize("ms", [-1, -60_000])
def test_r13_fake_clock_refuses_to_go_backwards(ms: int) -> None:
    clock = FakeClock(start_ms=100_000)
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(ms)
    assert clock.now_ms() == 100_000, "a refused advance must leave the time as it was"


def test_r13_fake_clock_advances_from_many_threads_all_count() -> None:
    clock = FakeClock(start_ms=0)
    threads, steps = 8, 2_000

    def worker() -> None:
        for _ in range(steps):
            clock.advance(1)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert clock.now_ms() == threads * steps


def test_r13_system_clock_reads_the_wall_clock_in_ms() -> None:
    before = _wall_ms()
    value = SystemClock().now_ms()
    after = _wall_ms()
    assert isinstance(value, int)
    assert before <= value <= after


@pytest.mark.parametrize("offset_ms", [0, 5_000, -5_000, 3_600_000])
def test_r13_offset_clock_shifts_the_wall_clock(offset_ms: int) -> None:
    clock = OffsetClock(offset_ms)
    before = _wall_ms()
    value = clock.now_ms()
    after = _wall_ms()
    assert before + offset_ms <= value <= after + offset_ms


def test_r13_offset_clock_can_be_refreshed() -> None:
    """With PostgreSQL the offset to the database's time is re-measured while running."""
    clock = OffsetClock()
    assert clock.offset_ms == 0
    clock.offset_ms = 10_000
    before = _wall_ms()
    value = clock.now_ms()
    after = _wall_ms()
    assert before + 10_000 <= value <= after + 10_000


def test_r13_every_clock_satisfies_the_protocol() -> None:
    def read(clock: Clock) -> int:
        return clock.now_ms()

    clocks: list[Clock] = [SystemClock(), OffsetClock(0), FakeClock()]
    assert all(isinstance(read(clock), int) for clock in clocks)


def test_r13_offset_is_taken_from_the_shortest_round_trip_at_its_middle() -> None:
    samples = [
        ClockSample(sent_ms=1_000, remote_ms=5_900, received_ms=3_000),  # a 2 s stall
        ClockSample(sent_ms=4_000, remote_ms=9_005, received_ms=4_010),  # the best: 10 ms
        ClockSample(sent_ms=5_000, remote_ms=10_000, received_ms=5_400),
    ]
    # The middle of the 10 ms round trip is 4,005: the other clock is 5,000 ahead.
    assert offset_from_samples(samples) == 5_000


def test_r13_a_late_answer_does_not_put_the_clock_behind() -> None:
    # Same clocks (true offset 0); the answer waited 1.5 s on our side before it was read.
    late = ClockSample(sent_ms=10_000, remote_ms=10_002, received_ms=11_500)
    quick = ClockSample(sent_ms=12_000, remote_ms=12_002, received_ms=12_004)
    assert offset_from_samples([late]) == 10_002 - 10_750  # at most half the round trip off
    assert offset_from_samples([late, quick]) == 0


def test_r13_offset_needs_a_sample() -> None:
    with pytest.raises(ValueError, match="no clock samples"):
        offset_from_samples([])
