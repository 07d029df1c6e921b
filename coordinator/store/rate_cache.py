"""Which queues a store saw without a rate, lately (issue 41): a start of such a queue's
job is not counted against a rate, which saves the start's transaction a round trip to
PostgreSQL (its writes otherwise go out as one statement, ``store.pg_held``).

Every claim reads its queues' controls afresh and tells the cache what it saw, so a
queue given a rate is known as rated by the next claim of it on this store; a start
comes after its job's claim, and a job claimed under a rate is counted when it starts.
An entry lasts ``UNRATED_TTL_S``: a start on this store of a job another replica claimed
(its worker reconnected here) is counted unless this store saw the queue unrated that
recently. A queue not in the cache is treated as rated (its starts are counted: the
statement writes nothing for a queue without a rate).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

UNRATED_TTL_S = 2.0
"""How long a queue seen without a rate is trusted to have none."""


class UnratedQueues:
    """Queue name -> when a claim last saw it without a rate (monotonic seconds)."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._seen: dict[str, float] = {}
        self._max_entries = max_entries
        self._clock = clock

    def unrated(self, queue: str) -> bool:
        """Whether ``queue`` was seen without a rate within ``UNRATED_TTL_S``."""
        seen = self._seen.get(queue)
        return seen is not None and self._clock() - seen < UNRATED_TTL_S

    def learn(self, rated: Mapping[str, bool]) -> None:
        """Records what a committed transaction saw: each queue, rated or not."""
        now = self._clock()
        for queue, has_rate in rated.items():
            if has_rate:
                self._seen.pop(queue, None)
            else:
                self._seen[queue] = now
        if len(self._seen) > self._max_entries:  # a bounded memory
            self._seen.clear()
