"""Delays between tries: equal-jitter exponential backoff (R-2) and the unstarted
re-queue delay (R-4)."""

from __future__ import annotations

from typing import Protocol


class RandomSource(Protocol):
    def randint(self, a: int, b: int) -> int: ...


def nominal_delay_ms(run_number: int, initial_ms: int, max_ms: int) -> int:
    """``initial * 2^(n-1)`` capped at ``max``, for the delay after run ``n`` (n >= 1)."""
    if run_number < 1:
        raise ValueError("run numbers start at 1")
    # Shift only as far as can matter: beyond 2^40 any sane delay is capped anyway.
    exponent = min(run_number - 1, 40)
    return min(initial_ms << exponent, max_ms)


def retry_delay_ms(run_number: int, initial_ms: int, max_ms: int, rng: RandomSource) -> int:
    """R-2: uniformly random in ``[nominal/2, nominal]`` (equal jitter), whole ms."""
    nominal = nominal_delay_ms(run_number, initial_ms, max_ms)
    return rng.randint((nominal + 1) // 2, nominal)


def unstarted_delay_ms(streak: int, initial_ms: int, max_ms: int) -> int:
    """R-4: the re-queue delay after the ``streak``-th consecutive unstarted claim.

    No jitter: these claims never ran user code, so there is no thundering retry to spread.
    """
    return nominal_delay_ms(streak, initial_ms, max_ms)
