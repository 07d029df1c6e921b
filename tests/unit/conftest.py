"""Fixtures for the pure domain's unit tests."""

from __future__ import annotations

import pytest
from domain_doubles import EndOfRange, NoRandom


@pytest.fixture
def low_rng() -> EndOfRange:
    """Always picks the low end of the range (and records the ranges asked for)."""
    return EndOfRange("low")


@pytest.fixture
def high_rng() -> EndOfRange:
    """Always picks the high end of the range (and records the ranges asked for)."""
    return EndOfRange("high")


@pytest.fixture
def no_rng() -> NoRandom:
    """Fails the test if a decision draws a random number."""
    return NoRandom()
