"""Wakes WaitJob callers when their job ends, without polling the store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class TerminalWatch:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def register(self, job_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters.setdefault(job_id, set()).add(event)
        return event

    def unregister(self, job_id: str, event: asyncio.Event) -> None:
        waiters = self._waiters.get(job_id)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del self._waiters[job_id]

    def finished(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            for event in self._waiters.pop(job_id, ()):
                event.set()
