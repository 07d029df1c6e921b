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


CONTROL_ORDER: tuple[WaitingReason, ...] = (
    WaitingReason.QUEUE_PAUSED,
    WaitingReason.QUEUE_LIMIT,
    WaitingReason.KEY_LIMIT,
    WaitingReason.RATE,
)
"""The order in which a queue's controls hold a claimable job back, stated once: the
claim applies them so (``store.claims``: a paused queue gives nothing, a limited one at
most its room, then each key's room, then the rate, so a job a limit refuses never takes
the rate's room), ``waiting_reason`` names the first that holds, and the held-back
arithmetic (``domain.backlog``) charges each control in turn.
tests/contract/test_control_order.py checks that all three agree."""


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
    not read). One reason, the first in ``CONTROL_ORDER`` that holds."""
    if queue is None:
        return None
    rate = _rate_of(queue)
    holds = {
        WaitingReason.QUEUE_PAUSED: queue.paused,
        WaitingReason.QUEUE_LIMIT: queue.concurrency_limit is not None
        and queue_active >= queue.concurrency_limit,
        WaitingReason.KEY_LIMIT: queue.key_limit is not None and key_active >= queue.key_limit,
        WaitingReason.RATE: rate is not None and rate_used is not None and held_by_rate(rate, rate_used, key),
    }
    return next((reason for reason in CONTROL_ORDER if holds[reason]), None)


def _rate_of(queue: QueueRecord) -> QueueRate | None:
    if queue.rate_count is None or queue.rate_period_ms is None:
        return None
    return QueueRate(queue.rate_count, queue.rate_period_ms, queue.rate_per_key)
