"""R-2 equal-jitter retry delays and R-4 unstarted re-queue delays."""

from __future__ import annotations

import random
import statistics

import pytest
from domain_doubles import EndOfRange
from hypothesis import given
from hypothesis import strategies as st

from coordinator.domain.backoff import nominal_delay_ms, retry_delay_ms, unstarted_delay_ms

INITIAL_MS = 5_000
MAX_MS = 60_000
DAY_MS = 86_400_000
SEEDS = range(2_000)

# The seed document's table with the defaults (5 s initial, 60 s max): after run n the
# next try waits between these bounds. Run 4 (20-40 s) follows from the formula.
SEED_DOC_TABLE_MS = {
    1: (2_500, 5_000),
    2: (5_000, 10_000),
    3: (10_000, 20_000),
    4: (20_000, 40_000),
    5: (30_000, 60_000),
    6: (30_000, 60_000),
    7: (30_000, 60_000),
    8: (30_000, 60_000),
}


def _nominal(run_number: int) -> int:
    return min(INITIAL_MS * int(2 ** (run_number - 1)), MAX_MS)


@pytest.mark.parametrize("run_number", sorted(SEED_DOC_TABLE_MS))
def test_r2_nominal_delay_doubles_from_5_s_and_is_capped_at_60_s(run_number: int) -> None:
    nominal = nominal_delay_ms(run_number, INITIAL_MS, MAX_MS)
    assert nominal == _nominal(run_number)
    assert nominal == SEED_DOC_TABLE_MS[run_number][1]


@pytest.mark.parametrize("run_number", sorted(SEED_DOC_TABLE_MS))
def test_r2_jitter_range_matches_the_seed_document(
    run_number: int, low_rng: EndOfRange, high_rng: EndOfRange
) -> None:
    """Both ends are reachable: the low end is nominal/2, the high end the nominal."""
    low, high = SEED_DOC_TABLE_MS[run_number]
    assert retry_delay_ms(run_number, INITIAL_MS, MAX_MS, low_rng) == low
    assert retry_delay_ms(run_number, INITIAL_MS, MAX_MS, high_rng) == high
    # One draw over exactly [nominal/2, nominal]: no other randomness and no clamping after.
    assert low_rng.calls == [(low, high)]
    assert high_rng.calls == [(low, high)]


@pytest.mark.parametrize("run_number", sorted(SEED_DOC_TABLE_MS))
def test_r2_random_delays_lie_in_half_nominal_to_nominal(run_number: int) -> None:
    nominal = _nominal(run_number)
    delays = [retry_delay_ms(run_number, INITIAL_MS, MAX_MS, random.Random(seed)) for seed in SEEDS]
    assert all(isinstance(delay, int) for delay in delays)
    assert all(nominal / 2 <= delay <= nominal for delay in delays)
    # Uniform over the range: the draws spread over all of it and centre on 3/4 nominal.
    assert min(delays) < nominal / 2 + nominal * 0.01
    assert max(delays) > nominal - nominal * 0.01
    assert statistics.fmean(delays) == pytest.approx(0.75 * nominal, rel=0.02)
    assert len(set(delays)) > len(delays) // 2, "jitter actually spreads the delays"


@pytest.mark.parametrize("run_number", [1, 2, 3, 5, 8])
def test_r2_same_seed_same_delay(run_number: int) -> None:
    first = retry_delay_ms(run_number, INITIAL_MS, MAX_MS, random.Random(7))
    assert first == retry_delay_ms(run_number, INITIAL_MS, MAX_MS, random.Random(7))


@pytest.mark.parametrize("run_number", [9, 20, 41, 42, 100, 10_000])
def test_r2_long_runs_stay_capped(run_number: int, low_rng: EndOfRange, high_rng: EndOfRange) -> None:
    assert nominal_delay_ms(run_number, INITIAL_MS, MAX_MS) == MAX_MS
    assert retry_delay_ms(run_number, INITIAL_MS, MAX_MS, low_rng) == MAX_MS // 2
    assert retry_delay_ms(run_number, INITIAL_MS, MAX_MS, high_rng) == MAX_MS


@pytest.mark.parametrize("run_number", [0, -1])
def test_r2_run_numbers_start_at_1(run_number: int) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        nominal_delay_ms(run_number, INITIAL_MS, MAX_MS)
    with pytest.raises(ValueError, match="start at 1"):
        retry_delay_ms(run_number, INITIAL_MS, MAX_MS, random.Random(0))


@st.composite
def _delay_pairs(draw: st.DrawFn) -> tuple[int, int]:
    """A valid (initial, max) pair: whole ms, 1 ms to 24 h, initial <= max."""
    initial = draw(st.integers(min_value=1, max_value=DAY_MS))
    maximum = draw(st.integers(min_value=initial, max_value=DAY_MS))
    return initial, maximum


@given(pair=_delay_pairs(), run_number=st.integers(min_value=1, max_value=500))
def test_r2_nominal_is_initial_times_two_to_the_n_minus_1_capped(
    pair: tuple[int, int], run_number: int
) -> None:
    initial, maximum = pair
    assert nominal_delay_ms(run_number, initial, maximum) == min(initial * 2 ** (run_number - 1), maximum)


@given(pair=_delay_pairs(), run_number=st.integers(min_value=1, max_value=100), seed=st.integers())
def test_r2_any_valid_settings_give_a_whole_ms_delay_in_range(
    pair: tuple[int, int], run_number: int, seed: int
) -> None:
    initial, maximum = pair
    nominal = min(initial * 2 ** (run_number - 1), maximum)
    delay = retry_delay_ms(run_number, initial, maximum, random.Random(seed))
    assert isinstance(delay, int)
    assert nominal <= 2 * delay, "never below half the nominal"
    assert delay <= nominal
    assert delay >= 1


@given(pair=_delay_pairs(), run_number=st.integers(min_value=1, max_value=100))
def test_r2_jitter_range_is_as_wide_as_whole_ms_allow(pair: tuple[int, int], run_number: int) -> None:
    """With an odd nominal the low end is the first whole ms at or above nominal/2."""
    initial, maximum = pair
    nominal = min(initial * 2 ** (run_number - 1), maximum)
    low, high = EndOfRange("low"), EndOfRange("high")
    assert retry_delay_ms(run_number, initial, maximum, high) == nominal
    smallest = retry_delay_ms(run_number, initial, maximum, low)
    assert nominal <= 2 * smallest < nominal + 2


def test_r2_a_1_ms_nominal_gives_1_ms() -> None:
    assert retry_delay_ms(1, 1, 1, random.Random(0)) == 1


# --- R-4 ------------------------------------------------------------------------------


def test_r4_unstarted_delay_doubles_from_1_s_to_30_s() -> None:
    delays = [unstarted_delay_ms(streak, 1_000, 30_000) for streak in range(1, 9)]
    assert delays == [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]


def test_r4_unstarted_delay_follows_a_configured_pair() -> None:
    delays = [unstarted_delay_ms(streak, 250, 1_500) for streak in range(1, 6)]
    assert delays == [250, 500, 1_000, 1_500, 1_500]


def test_r4_unstarted_delay_has_no_jitter() -> None:
    """Same streak, same delay: no claim ran user code, so nothing to spread out."""
    assert len({unstarted_delay_ms(3, 1_000, 30_000) for _ in range(50)}) == 1


def test_r4_unstarted_streaks_start_at_1() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        unstarted_delay_ms(0, 1_000, 30_000)
