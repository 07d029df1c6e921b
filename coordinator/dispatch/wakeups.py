"""Why the dispatcher's loop wakes, in one place.

Every event that may give the loop something to do calls ``Wakeups.wake`` with its
reason (``Wake``). ``CLAIMS_AFTER`` is the table of what each reason asks of the next
batch: whether it carries claims, and whether sessions whose queues ran dry claim again.
The loop sleeps in ``Wakeups.sleep`` and, when it takes a batch, asks ``take_claim_news``
whether to claim and for which queues work was heard of.

Two wake-ups come from time rather than from an event: a job that becomes due
(``due``), and the idle re-check, after which another replica may have added work
unheard (both count as news of work in any queue).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from coordinator.config import CoordinatorConfig
from coordinator.domain.clock import Clock


class Wake(enum.Enum):
    """What woke the loop."""

    MESSAGE = "message"
    """A start, heartbeat, result or release waits to be written."""
    CREDIT = "credit"
    """A worker has credit to claim with: it sent some, or a claim gave some back."""
    WORK = "work"
    """Jobs may have become claimable (in one queue, or anywhere)."""
    STREAM_ENDING = "stream ending"
    """A stream is retiring: it ends once the loop has delivered what it wrote for it."""
    STOP = "stop"
    """The loop is to write what it holds and return."""


@dataclass(frozen=True, slots=True)
class ClaimsAfter:
    """What a wake-up asks of the next batch."""

    claim: bool
    """The next batch carries claims for the sessions with credit."""
    news_of_work: bool
    """Sessions whose queues ran dry (``WorkerSession.drained``) claim again, and a claim
    out meanwhile may have read too early (``WorkerSession.claim_may_be_stale``)."""


CLAIMS_AFTER: dict[Wake, ClaimsAfter] = {
    Wake.MESSAGE: ClaimsAfter(claim=False, news_of_work=False),
    Wake.CREDIT: ClaimsAfter(claim=True, news_of_work=False),
    Wake.WORK: ClaimsAfter(claim=True, news_of_work=True),
    Wake.STREAM_ENDING: ClaimsAfter(claim=False, news_of_work=False),
    Wake.STOP: ClaimsAfter(claim=False, news_of_work=False),
}


@dataclass(frozen=True, slots=True)
class ClaimNews:
    """What the next claims are for: taken once per batch (``take_claim_news``)."""

    heard_of_work: bool
    """Work was heard of since the last claims were taken."""
    queues: frozenset[str] | None
    """Where (None: any queue, e.g. another replica's or a retry's); only sessions
    taking from these need to claim again."""


class Wakeups:
    """The loop's one wake-up event and the news it carries."""

    __slots__ = (
        "_claim_needed",
        "_clock",
        "_config",
        "_event",
        "_next_due_ms",
        "_on_wake",
        "_work_arrived",
        "_work_in",
        "hears_all",
    )

    def __init__(
        self, config: CoordinatorConfig, clock: Clock, on_wake: Callable[[], None] = lambda: None
    ) -> None:
        """``on_wake`` hears every ``wake`` (the dispatcher ends a transaction's wait for
        its starts: ``dispatch.joined_starts``)."""
        self._config = config
        self._clock = clock
        self._on_wake = on_wake
        self._event = asyncio.Event()
        self._claim_needed = True  # a new loop claims for whoever has credit
        self._work_arrived = False
        self._work_in: set[str] | None = set()
        self._next_due_ms: int | None = None
        self.hears_all = False
        """Every write that makes jobs claimable reaches ``wake(Wake.WORK)``: the idle
        re-check then runs only rarely (``Dispatcher.hears_all``)."""

    def wake(self, reason: Wake, queue: str | None = None) -> None:
        """Wakes the loop for ``reason`` (``queue``: where work was heard of, for
        ``Wake.WORK``; None: anywhere)."""
        asks = CLAIMS_AFTER[reason]
        if asks.news_of_work:
            self._heard_of_work({queue} if queue is not None else None)
        self._claim_needed = self._claim_needed or asks.claim
        self._event.set()
        self._on_wake()

    def due(self, run_at_ms: int) -> None:
        """A job becomes claimable at ``run_at_ms``: the loop wakes then, as for news of
        work anywhere (unless it wakes sooner for an earlier one)."""
        if self._next_due_ms is None or run_at_ms < self._next_due_ms:
            self._next_due_ms = run_at_ms
            self._event.set()

    def _heard_of_work(self, queues: AbstractSet[str] | None) -> None:
        self._claim_needed = self._work_arrived = True
        if queues is None:
            self._work_in = None
        elif self._work_in is not None:
            self._work_in.update(queues)

    async def sleep(self) -> None:
        """Returns when woken, when a due job's time came, or after the idle interval
        (another replica may have added work: news of work anywhere)."""
        config = self._config
        timeout = config.idle_interval_s if self.hears_all else config.idle_recheck_interval_s
        if self._next_due_ms is not None:
            timeout = min(timeout, max(self._next_due_ms - self._clock.now_ms(), 0) / 1000)
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            self._heard_of_work(None)
        self._event.clear()
        if self._next_due_ms is not None and self._next_due_ms <= self._clock.now_ms():
            self._next_due_ms = None
            self._heard_of_work(None)

    def take_claim_news(self) -> ClaimNews | None:
        """Whether the batch taken now carries claims (None: it does not), and the news
        of work since the last claims; both start over."""
        if not self._claim_needed:
            return None
        self._claim_needed = False
        if not self._work_arrived:
            return ClaimNews(heard_of_work=False, queues=frozenset())
        queues = None if self._work_in is None else frozenset(self._work_in)
        self._work_arrived, self._work_in = False, set()
        return ClaimNews(heard_of_work=True, queues=queues)
