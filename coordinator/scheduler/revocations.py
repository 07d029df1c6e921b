"""Revoked tokens' streams: a token revoked on any replica ends the worker streams it
opened on this one within ``auth_cache_ttl_s`` (the revoking replica ends its own at
once). Open streams are checked, not every token: the check is one indexed read."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator.scheduler.loop import every
from coordinator.service.executors import Executors
from coordinator.store import Store


class RevokedTokenStreams:
    def __init__(
        self,
        store: Store,
        executors: Executors,
        open_token_ids: Callable[[], set[str]],
        on_revoked: Callable[[str], None],
        interval_s: float,
    ) -> None:
        self.store = store
        self.executors = executors
        self.open_token_ids = open_token_ids
        self.on_revoked = on_revoked
        self.interval_s = interval_s

    async def run_once(self) -> None:
        token_ids = self.open_token_ids()
        if not token_ids:
            return
        for token_id in sorted(await self.executors.read(self.store.revoked_tokens, sorted(token_ids))):
            self.on_revoked(token_id)

    async def run(self, stop: asyncio.Event) -> None:
        await every(self.interval_s, stop, self.run_once, "revoked-token check")
