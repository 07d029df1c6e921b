"""Claims take turns among the sessions with credit (``dispatch.claims.Turns``): a light
load's jobs go to every connected worker in turn, not all to the one that happens to
come first. The batches are carried out by a stand-in for ``WorkerOps.process`` that
hands each claim one job while it has jobs, as the first requests of a round get the
claimable jobs first."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerHello, WorkerSession
from coordinator.domain.clock import FakeClock
from coordinator.service.executors import Executors
from coordinator.service.work import BatchAnswers, WorkBatch
from tests.support import eventually

CONFIG = CoordinatorConfig(idle_interval_s=3600, idle_recheck_interval_s=3600)


class ClaimOrder:
    """Records, per batch, which workers claimed and in what order; claims nothing."""

    def __init__(self) -> None:
        self.rounds: list[list[str]] = []
        self.lock = threading.Lock()

    def __call__(self, batch: WorkBatch) -> BatchAnswers:
        with self.lock:
            if batch.claims:
                self.rounds.append([claim.worker_id for claim in batch.claims])
        return BatchAnswers(claims=[[] for _ in batch.claims])

    def firsts(self) -> list[str]:
        with self.lock:
            return [claimers[0] for claimers in self.rounds]


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    pool = Executors(postgres=False)
    yield pool
    pool.shutdown()


def _open(dispatcher: Dispatcher, worker_id: str) -> WorkerSession:
    session = dispatcher.open(WorkerHello(worker_id, ("default",), ("noop",), 4, 60_000))
    session.add_credit(4)
    return session


async def test_a_batchs_claims_start_with_each_session_in_turn(executors: Executors) -> None:
    process = ClaimOrder()
    dispatcher = Dispatcher(process, CONFIG, FakeClock(), executors, lambda e: None)
    for worker_id in ("w-a", "w-b", "w-c"):
        _open(dispatcher, worker_id)
    loop = asyncio.create_task(dispatcher.run())
    try:
        for round_number in range(1, 4):
            # Work heard of: every session with credit claims again, in one batch.
            dispatcher.jobs_available()
            await eventually(lambda n=round_number: len(process.firsts()) >= n, what="a claim round")
        rounds = process.rounds[:3]
        assert all(sorted(claimers) == ["w-a", "w-b", "w-c"] for claimers in rounds)
        assert sorted(process.firsts()[:3]) == ["w-a", "w-b", "w-c"]
    finally:
        dispatcher.stop()
        await asyncio.wait_for(loop, 10)
