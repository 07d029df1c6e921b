"""Each queue's depth over the last hour, as this replica saw it: the queue statistics
loop (``scheduler.stats``, every ``health_check_interval_s``) hands each read here, and
the newest read of each minute is kept, for 60 minutes, for at most ``max_queues``
queues (the first seen; a queue beyond them has no series). Memory stays bounded
whatever the number of queues or the uptime, and nothing more is read from the database.

A queue's depth is its jobs not started yet: available, scheduled and waiting. Each
replica keeps its own series from the same database counts, so they agree where they
overlap; a replica started less than an hour ago has a shorter one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

MINUTE_MS = 60_000
MINUTES = 60
DEPTH_STATES = frozenset({"available", "scheduled", "waiting"})


class DepthHistory:
    def __init__(self, max_queues: int = 500) -> None:
        self.max_queues = max_queues
        self._series: dict[str, dict[int, int]] = {}
        """Per queue: minute (its first millisecond) -> the depth last read in it."""
        self._read_minutes: set[int] = set()
        """Minutes with a read: a queue not in a read then had no job waiting."""
        self._full = False
        """A queue was left out for ``max_queues``: an unknown queue's depth is unknown."""
        self._lock = threading.Lock()

    def note(
        self, depths: Mapping[tuple[str, str], int], now_ms: int, known: frozenset[str] = frozenset()
    ) -> None:
        """One read of the queue statistics: depth per (queue, state) at ``now_ms``;
        ``known`` queues without a count have depth 0."""
        minute = now_ms - now_ms % MINUTE_MS
        per_queue = dict.fromkeys(known, 0)
        for (queue, state), count in depths.items():
            if state in DEPTH_STATES:
                per_queue[queue] = per_queue.get(queue, 0) + count
        oldest = minute - (MINUTES - 1) * MINUTE_MS
        with self._lock:
            for queue in self._series:
                per_queue.setdefault(queue, 0)  # read, and no job waits in it now
            for queue in sorted(per_queue):
                series = self._series.get(queue)
                if series is None:
                    if len(self._series) >= self.max_queues:
                        self._full = True
                        continue
                    series = self._series[queue] = {}
                series[minute] = per_queue[queue]
            self._read_minutes = {m for m in (*self._read_minutes, minute) if m >= oldest}
            for series in self._series.values():
                for stale in [m for m in series if m < oldest]:
                    del series[stale]

    def series(self, queue: str, now_ms: int) -> tuple[int | None, ...]:
        """The last ``MINUTES`` minutes' depths of ``queue``, oldest first; None for a
        minute with no read (or for a queue left out for ``max_queues``)."""
        minute = now_ms - now_ms % MINUTE_MS
        with self._lock:
            kept = self._series.get(queue)
            if kept is None and self._full:
                return (None,) * MINUTES
            kept, read = dict(kept or {}), set(self._read_minutes)
        minutes = [minute - (MINUTES - 1 - n) * MINUTE_MS for n in range(MINUTES)]
        return tuple(kept.get(m, 0) if m in read else None for m in minutes)
