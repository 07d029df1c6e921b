"""Messages naming a claim handed out before its transaction committed wait for that
commit (``dispatch.uncommitted``): the dispatcher holds back a start, release or
heartbeat naming one, and lets it go, in order, once the transaction settles. The
batches are carried out by a stand-in for ``WorkerOps.process`` on the real writer
threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerHello, WorkerSession
from coordinator.dispatch.uncommitted import JoiningStarts, UncommittedClaims
from coordinator.domain.clock import FakeClock
from coordinator.service.executors import Executors
from coordinator.service.work import BatchAnswers, HeartbeatAnswer, StartAnswer, WorkBatch
from tests.support import eventually


def test_a_message_naming_no_uncommitted_claim_goes_on_at_once() -> None:
    uncommitted = UncommittedClaims()
    replayed: list[str] = []
    assert not uncommitted.hold_back(["a-1"], lambda: replayed.append("a-1"))
    uncommitted.add(["a-2"])
    assert not uncommitted.hold_back(["a-1", "a-3"], lambda: replayed.append("a-1"))
    assert (uncommitted.held_back, replayed) == (0, [])


def test_messages_held_back_go_on_in_order_when_their_claims_settle() -> None:
    uncommitted = UncommittedClaims()
    uncommitted.add(["a-1", "a-2"])
    uncommitted.add(["b-1"])  # another transaction's
    replayed: list[str] = []

    def replay(name: str, attempt_ids: list[str]) -> None:
        if not uncommitted.hold_back(attempt_ids, lambda: replay(name, attempt_ids)):
            replayed.append(name)

    replay("start a-2", ["a-2"])
    replay("heartbeat a-1 b-1", ["a-1", "b-1"])
    replay("release a-1", ["a-1"])
    assert (uncommitted.held_back, replayed) == (3, [])
    uncommitted.settle(["a-1", "a-2"])
    # The heartbeat also names b-1, whose transaction has not settled: held back again.
    assert (replayed, uncommitted.held_back) == (["start a-2", "release a-1"], 1)
    assert "a-1" not in uncommitted and "b-1" in uncommitted
    uncommitted.settle(["b-1"])
    assert (replayed[-1], uncommitted.held_back) == ("heartbeat a-1 b-1", 0)


def test_a_failed_transactions_starts_go_on_before_the_messages_held_back() -> None:
    uncommitted = UncommittedClaims()
    uncommitted.add(["a-1"])
    replayed: list[str] = []
    assert uncommitted.hold_back(["a-1"], replayed.append, "release a-1")
    uncommitted.settle(["a-1"], [(replayed.append, ("start a-1",))])
    assert replayed == ["start a-1", "release a-1"]


def test_starts_of_the_transactions_own_claims_are_taken_until_it_stops_waiting() -> None:
    joining: JoiningStarts[str] = JoiningStarts(["a-1", "a-2"])
    assert joining.offer("a-1", "start a-1")
    assert not joining.offer("b-1", "start b-1")  # another transaction's claim
    assert not joining.offer("a-1", "start a-1 again")  # taken once
    assert joining.gather(0.001) == ["start a-1"]  # a-2's start did not come in time
    assert not joining.offer("a-2", "start a-2")  # too late: it goes the usual way
    assert joining.taken == ["start a-1"]


def test_the_wait_ends_as_soon_as_every_start_came() -> None:
    joining: JoiningStarts[str] = JoiningStarts(["a-1", "a-2"])
    gathered: list[list[str]] = []
    writer = threading.Thread(target=lambda: gathered.append(joining.gather(60)))
    writer.start()
    assert joining.offer("a-2", "start a-2") and joining.offer("a-1", "start a-1")
    writer.join(30)
    assert not writer.is_alive() and gathered == [["start a-2", "start a-1"]]


def test_stop_ends_the_wait_and_takes_no_more() -> None:
    joining: JoiningStarts[str] = JoiningStarts(["a-1"])
    gathered: list[list[str]] = []
    writer = threading.Thread(target=lambda: gathered.append(joining.gather(60)))
    writer.start()
    joining.stop()
    writer.join(30)
    assert not writer.is_alive() and gathered == [[]]
    assert not joining.offer("a-1", "start a-1")


class Recording:
    """Carries out every batch at once: starts granted, heartbeats answered, and each
    batch's messages recorded."""

    def __init__(self) -> None:
        self.batches: list[WorkBatch] = []
        self.lock = threading.Lock()

    def __call__(self, batch: WorkBatch) -> BatchAnswers:
        with self.lock:
            self.batches.append(batch)
        return BatchAnswers(
            starts=[StartAnswer(m.attempt_id, True, 1) for m in batch.starts],
            heartbeats=[HeartbeatAnswer(set(), 0) for _ in batch.heartbeats],
            claims=[[] for _ in batch.claims],
        )

    def sent(self) -> list[tuple[str, tuple[str, ...]]]:
        with self.lock:
            return [
                *(("start", (m.attempt_id,)) for b in self.batches for m in b.starts),
                *(("release", (m.attempt_id,)) for b in self.batches for m in b.releases),
                *(("heartbeat", tuple(h.attempt_ids)) for b in self.batches for h in b.heartbeats),
            ]


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    pool = Executors(postgres=True)
    yield pool
    pool.shutdown()


async def test_the_dispatcher_holds_back_what_names_an_uncommitted_claim(executors: Executors) -> None:
    process = Recording()
    config = CoordinatorConfig(idle_interval_s=3600, idle_recheck_interval_s=3600)
    dispatcher = Dispatcher(process, config, FakeClock(), executors, lambda e: None, batches_in_flight=2)
    session: WorkerSession = dispatcher.open(WorkerHello("w", ("default",), (), 8, 60_000))
    loop = asyncio.create_task(dispatcher.run())
    try:
        dispatcher.uncommitted.add(["early-1", "early-2"])
        session.start("early-1")
        session.release("early-2")
        session.heartbeat(["committed-1", "early-2"], 60_000)
        session.start("committed-2")  # names no uncommitted claim: goes on
        await eventually(lambda: ("start", ("committed-2",)) in process.sent(), what="the start that may go")
        assert dispatcher.uncommitted.held_back == 3
        assert [kind for kind, _ in process.sent()] == ["start"]
        dispatcher.uncommitted.settle(["early-1", "early-2"])
        await eventually(lambda: len(process.sent()) == 4, what="the messages held back")
        assert sorted(process.sent()) == [
            ("heartbeat", ("committed-1", "early-2")),
            ("release", ("early-2",)),
            ("start", ("committed-2",)),
            ("start", ("early-1",)),
        ]
        assert dispatcher.uncommitted.held_back == 0
    finally:
        dispatcher.stop()
        await asyncio.wait_for(loop, 10)
