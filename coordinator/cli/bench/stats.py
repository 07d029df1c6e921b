"""Percentiles and rates of ``runwick bench`` (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(ordered: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ascending ``ordered``, linear between ranks.

    Rank ``(n - 1) * p / 100`` counted from 0, as numpy's default and
    ``statistics.quantiles(method="inclusive")``: p0 is the minimum, p100 the maximum.

    Raises:
        ValueError: ``ordered`` is empty or ``p`` is outside 0-100.
    """
    if not ordered:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be 0 to 100, got {p!r}")
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rate(count: int, seconds: float) -> float | None:
    """``count / seconds``; None when no time passed (nothing to divide by)."""
    return count / seconds if seconds > 0 else None
