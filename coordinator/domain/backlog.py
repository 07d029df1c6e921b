"""How much of a queue's due backlog its controls let run now, and how much each control
holds back (docs/flow-control.md, docs/metrics.md): the arithmetic behind the gauge
``runwick_queue_held_back_jobs`` and the autoscalers' runnable count. Pure: the store
reads the counts (``store.backlog``).

The claim applies the controls in one order (``domain.flow.CONTROL_ORDER``: pause, the
queue's limit, the per-key limit, the rate; ``store.claims``,
``domain.flow.waiting_reason``). The counts follow it without knowing which job comes
first: each control is charged with the jobs that it, added to the ones before it, keeps
from running now. With ``runnable_i`` the jobs that could run now under the first ``i``
controls (a count that only shrinks as controls are added), a control holds back
``runnable_(i-1) - runnable_i``. So the kinds add up to the due jobs less the runnable
ones, and a queue at its limit charges everything to the limit, as ``waiting_reason``
names it for each job.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.domain.flow import CONTROL_ORDER, WaitingReason
from coordinator.domain.records import QueueRecord, QueueStats

KEYS_NAMED = 5
"""The keys at their limit (or rate) a queue's listing names, at most; it counts them all."""


@dataclass(frozen=True, slots=True)
class KeyedBacklog:
    """A queue's due jobs as its per-key controls see them, summed over its keys (one
    grouped read: ``store.backlog``). Without per-key controls every field is ``due``."""

    due: int
    """Due claimable jobs, counted up to the read's bound."""
    within_key_limit: int
    """Of them, summed over keys: at most each key's room under the per-key limit (the
    limit less its reserved and running jobs)."""
    within_key_rate: int
    """The same, also at most each key's room under a per-key rate (its count less its
    starts in the window and its reserved jobs)."""

    @classmethod
    def unkeyed(cls, due: int) -> KeyedBacklog:
        return cls(due, due, due)


@dataclass(frozen=True, slots=True)
class HeldBack:
    """What a queue's controls make of its due jobs now."""

    runnable: int
    """Jobs a claim could take now: the due ones no control holds back."""
    held: dict[WaitingReason, int]
    """Jobs held back per kind of control, for each control the queue has (0 included);
    empty for a queue with no control. The kinds are ``WaitingReason``'s: the gauge's
    ``kind`` label takes no other value."""


@dataclass(frozen=True, slots=True)
class QueueView:
    """One queue as ``GetQueue`` shows it: what a listing gives for it, and what its
    controls make of its available jobs now."""

    stats: QueueStats
    held: HeldBack


def hold_back(
    queue: QueueRecord, backlog: KeyedBacklog, queue_active: int, rate_room: int | None
) -> HeldBack:
    """Splits ``backlog`` into the runnable jobs and those each control holds back, the
    controls charged in ``CONTROL_ORDER``. ``queue_active`` is the queue's reserved and
    running jobs (every wire name: its limit counts them all); ``rate_room`` a
    queue-wide rate's room (None: no such rate)."""
    due = backlog.due
    if queue.paused:  # the claim reads no other control of a paused queue
        return HeldBack(0, {WaitingReason.QUEUE_PAUSED: due})
    rooms = _rooms(queue, backlog, queue_active, rate_room)
    held: dict[WaitingReason, int] = {}
    runnable = due
    for kind in CONTROL_ORDER:
        room = rooms.get(kind)
        if room is not None:
            runnable = _charge(held, kind, runnable, room)
    return HeldBack(runnable, held)


def _rooms(
    queue: QueueRecord, backlog: KeyedBacklog, queue_active: int, rate_room: int | None
) -> dict[WaitingReason, int]:
    """How many of the due jobs each control the queue has would let run on its own."""
    rooms: dict[WaitingReason, int] = {}
    if queue.concurrency_limit is not None:
        rooms[WaitingReason.QUEUE_LIMIT] = queue.concurrency_limit - queue_active
    if queue.key_limit is not None:
        rooms[WaitingReason.KEY_LIMIT] = backlog.within_key_limit
    if queue.rate_count is not None:
        within = backlog.within_key_rate
        rooms[WaitingReason.RATE] = within if rate_room is None else min(within, rate_room)
    return rooms


def _charge(held: dict[WaitingReason, int], kind: WaitingReason, runnable: int, room: int) -> int:
    """Charges ``kind`` with the runnable jobs past ``room``; what is left runnable."""
    left = max(0, min(runnable, room))
    held[kind] = runnable - left
    return left
