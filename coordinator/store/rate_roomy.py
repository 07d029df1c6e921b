"""What a store remembers for ``store.rate_locks``: per queue, whether its last claim
found the queue-wide rate roomy, and the server's bound on open transactions."""

from __future__ import annotations

SHARED_GRANTS = 256
"""Jobs of one queue a transaction holding its row in share mode may hand out, at most."""


class RoomyRates:
    """Per queue, whether this store's last claim found its queue-wide rate roomy; and
    the server's bound on open transactions, read once."""

    def __init__(self, max_entries: int) -> None:
        self._roomy: dict[str, bool] = {}
        self._max_entries = max_entries
        self.max_transactions: int | None = None

    def roomy(self, queue: str) -> bool:
        return self._roomy.get(queue, False)

    def learn(self, queue: str, roomy: bool) -> None:
        if len(self._roomy) >= self._max_entries and queue not in self._roomy:
            self._roomy.clear()  # a bounded memory: unknown queues take the exclusive lock
        self._roomy[queue] = roomy
