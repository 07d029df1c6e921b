"""Where fair turns start (``store.claim_turns``): per queue, the concurrency key a claim
of this store served last.

One memory per ``Store``, so two coordinators in one process (tests, an embedded
coordinator beside a server) each keep their own turns, as two replicas do. It is a
hint, never a rule: it moves where a claim's turns start, not which jobs are claimable,
so it needs no transaction: a claim rolled back after remembering its key only moves the
next start by one key. A queue this store deletes leaves it at the commit
(``Store._transaction``); one another replica deletes stays until the memory is full,
which then starts afresh (a bounded memory, like ``rate_cache.UnratedQueues``).
"""

from __future__ import annotations

from collections.abc import Iterable


class LastServed:
    """Queue name -> the key its last claim on this store served."""

    def __init__(self, max_queues: int) -> None:
        self._keys: dict[str, str] = {}
        self._max_queues = max_queues

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, queue: str) -> str | None:
        return self._keys.get(queue)

    def remember(self, queue: str, key: str) -> None:
        if len(self._keys) >= self._max_queues and queue not in self._keys:
            self._keys.clear()
        self._keys[queue] = key

    def forget(self, queues: Iterable[str]) -> None:
        """Drops deleted queues: a queue made again under the same name starts afresh."""
        for queue in queues:
            self._keys.pop(queue, None)
