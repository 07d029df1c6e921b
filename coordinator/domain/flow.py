"""Why a claimable job is not being claimed (docs/flow-control.md): the queue's controls
as ``store.claims`` applies them, stated for one job."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from coordinator.domain.rates import QueueRate, held_by_rate
from coordinator.domain.records import QueueRecord


class WaitingReason(StrEnum):
    QUEUE_PAUSED = "queue_paused"
    """The queue is paused."""
    QUEUE_LIMIT = "queue_limit"
    """The queue's concurrency limit is reached."""
    KEY_LIMIT = "key_limit"
    """The queue's per-key limit is reached for the job's concurrency key."""
    RATE = "rate"
    """The queue's rate (or, per key, its key's) has no room in the current window."""


def waiting_reason(
    queue: QueueRecord | None,
    queue_active: int,
    key_active: int,
    rate_used: Mapping[str, int] | None = None,
    key: str = "",
) -> WaitingReason | None:
    """Which control holds a claimable job of concurrency key ``key`` back, if any:
    ``queue_active`` and ``key_active`` are the queue's and the key's reserved and
    running jobs, ``rate_used`` what counts against the queue's rate now, per key (None:
    not read). One reason, the first that applies in the claim's order (``store.claims``):
    pause, the queue's limit, the per-key limit, then the rate."""
    if queue is None:
        return None
    if queue.paused:
        return WaitingReason.QUEUE_PAUSED
    if queue.concurrency_limit is not None and queue_active >= queue.concurrency_limit:
        return WaitingReason.QUEUE_LIMIT
    if queue.key_limit is not None and key_active >= queue.key_limit:
        return WaitingReason.KEY_LIMIT
    rate = _rate_of(queue)
    if rate is not None and rate_used is not None and held_by_rate(rate, rate_used, key):
        return WaitingReason.RATE
    return None


def _rate_of(queue: QueueRecord) -> QueueRate | None:
    if queue.rate_count is None or queue.rate_period_ms is None:
        return None
    return QueueRate(queue.rate_count, queue.rate_period_ms, queue.rate_per_key)
