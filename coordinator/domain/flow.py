"""Why a claimable job is not being claimed (docs/flow-control.md): the queue's controls
as ``store.claims`` applies them, stated for one job."""

from __future__ import annotations

from enum import StrEnum

from coordinator.domain.records import QueueRecord


class WaitingReason(StrEnum):
    QUEUE_PAUSED = "queue_paused"
    """The queue is paused."""
    QUEUE_LIMIT = "queue_limit"
    """The queue's concurrency limit is reached."""
    KEY_LIMIT = "key_limit"
    """The queue's per-key limit is reached for the job's concurrency key."""


def waiting_reason(queue: QueueRecord | None, queue_active: int, key_active: int) -> WaitingReason | None:
    """Which control holds a claimable job back, if any: ``queue_active`` and
    ``key_active`` are the queue's and the job's key's reserved and running jobs. The
    first that applies in the claim's order: pause, the queue's limit, the per-key limit."""
    if queue is None:
        return None
    if queue.paused:
        return WaitingReason.QUEUE_PAUSED
    if queue.concurrency_limit is not None and queue_active >= queue.concurrency_limit:
        return WaitingReason.QUEUE_LIMIT
    if queue.key_limit is not None and key_active >= queue.key_limit:
        return WaitingReason.KEY_LIMIT
    return None
