"""The dispatcher writes up to ``batches_in_flight`` worker batches at once (PostgreSQL),
and one at a time when it is 1 (SQLite); a stream that is retired, or a stop, waits for
every batch in flight, so nothing written for a stream is delivered after its end.

The batches are carried out by a stand-in for ``WorkerOps.process`` that blocks until
the test lets it go, on the real writer threads (``Executors``)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerHello, WorkerSession
from coordinator.domain.clock import FakeClock
from coordinator.service.executors import Executors
from coordinator.service.work import BatchAnswers, EnqueueItem, StartAnswer, WorkBatch
from tests.support import eventually


class GatedProcess:
    """Answers every start granted, every claim empty (its queues drained) and every
    enqueue call written with no jobs, once the test opens the gate of its batch."""

    def __init__(self) -> None:
        self.started: list[list[str]] = []
        self.claimed_for: list[list[str]] = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()
        self._gates: list[threading.Event] = []
        self.batch_began = threading.Semaphore(0)

    def __call__(self, batch: WorkBatch) -> BatchAnswers:
        gate = threading.Event()
        with self._lock:
            self._gates.append(gate)
            self.started.append([m.attempt_id for m in batch.starts])
            self.claimed_for.append([c.worker_id for c in batch.claims])
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        self.batch_began.release()
        gate.wait(10)
        with self._lock:
            self.running -= 1
        return BatchAnswers(
            starts=[StartAnswer(m.attempt_id, True, 1) for m in batch.starts],
            claims=[[] for _ in batch.claims],
            drained=[True for _ in batch.claims],
            enqueued=[[] for _ in batch.enqueues],
        )

    def open(self, index: int) -> None:
        self._gates[index].set()

    def open_all(self) -> None:
        for gate in self._gates:
            gate.set()

    async def wait_for_batches(self, count: int) -> None:
        for _ in range(count):
            assert await asyncio.to_thread(self.batch_began.acquire, True, 10), "batch not begun"


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    pool = Executors(postgres=True)  # several writer threads, as on PostgreSQL
    yield pool
    pool.shutdown()


def _dispatcher(process: GatedProcess, executors: Executors, in_flight: int) -> Dispatcher:
    return Dispatcher(
        process, CoordinatorConfig(), FakeClock(), executors, lambda e: None, batches_in_flight=in_flight
    )


@contextlib.asynccontextmanager
async def _running(dispatcher: Dispatcher, process: GatedProcess) -> AsyncIterator[None]:
    """Runs the dispatcher's loop for the block; then lets every batch go and stops it."""
    loop = asyncio.create_task(dispatcher.run())
    try:
        yield
    finally:
        process.open_all()
        dispatcher.stop()
        await asyncio.wait_for(loop, 10)


def _one_stream(executors: Executors, in_flight: int) -> tuple[GatedProcess, Dispatcher, WorkerSession]:
    process = GatedProcess()
    dispatcher = _dispatcher(process, executors, in_flight)
    return process, dispatcher, _session(dispatcher, "w")


def _without_idle_rechecks(executors: Executors) -> tuple[GatedProcess, Dispatcher]:
    """Two batches in flight, and no idle re-check within a test: only the wake-ups a
    test causes lead to claims."""
    process = GatedProcess()
    config = CoordinatorConfig(idle_interval_s=3600, idle_recheck_interval_s=3600)
    dispatcher = Dispatcher(process, config, FakeClock(), executors, lambda e: None, batches_in_flight=2)
    dispatcher.hears_all(True)
    return process, dispatcher


def _session(dispatcher: Dispatcher, name: str, wire_names: tuple[str, ...] = ()) -> WorkerSession:
    return dispatcher.open(WorkerHello(name, ("default",), wire_names, 8, 60_000))


async def _next(session: WorkerSession) -> object:
    return await asyncio.wait_for(session.outbox.get(), 10)


async def test_two_batches_are_written_at_once_and_each_answered(executors: Executors) -> None:
    process, dispatcher, session = _one_stream(executors, 2)
    async with _running(dispatcher, process):
        session.start("a-1")
        await process.wait_for_batches(1)
        session.start("a-2")  # arrives while the first batch is being written
        await process.wait_for_batches(1)
        assert process.most_running == 2
        process.open(1)  # the second finishes first: its answer is not held back
        assert await _next(session) == StartAnswer("a-2", True, 1)
        process.open(0)
        assert await _next(session) == StartAnswer("a-1", True, 1)


async def test_one_in_flight_writes_one_batch_at_a_time(executors: Executors) -> None:
    process, dispatcher, session = _one_stream(executors, 1)
    async with _running(dispatcher, process):
        session.start("a-1")
        await process.wait_for_batches(1)
        session.start("a-2")
        await asyncio.sleep(0.05)  # room for a second batch to begin, if it could
        assert process.started == [["a-1"]]
        process.open(0)
        assert await _next(session) == StartAnswer("a-1", True, 1)
        await process.wait_for_batches(1)
        assert process.started == [["a-1"], ["a-2"]] and process.most_running == 1
        process.open(1)
        assert await _next(session) == StartAnswer("a-2", True, 1)


async def test_messages_waiting_go_to_the_writer_before_the_answers_ahead_of_them_are_delivered(
    executors: Executors, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the next batch's messages wait while a batch is written: the writer
    gets them as soon as it answers, not after the loop has delivered (and framed) that
    batch's answers, time in which the writer would sit idle."""
    process, dispatcher, session = _one_stream(executors, 1)
    events: list[str] = []
    submit = executors.submit_write

    def logged_submit(function: Any, batch: WorkBatch) -> Any:
        events.append("written " + " ".join(m.attempt_id for m in batch.starts))
        return submit(function, batch)

    deliver = session.deliver

    def logged_deliver(item: Any) -> None:
        events.append(f"delivered {item.attempt_id}")
        deliver(item)

    monkeypatch.setattr(executors, "submit_write", logged_submit)
    monkeypatch.setattr(session, "deliver", logged_deliver)
    async with _running(dispatcher, process):
        session.start("a-1")
        await process.wait_for_batches(1)
        session.start("a-2")
        session.start("a-3")
        process.open(0)
        await process.wait_for_batches(1)
        process.open(1)
        assert [await _next(session) for _ in range(3)] == [
            StartAnswer(a, True, 1) for a in ("a-1", "a-2", "a-3")
        ]
    assert events == ["written a-1", "written a-2 a-3", "delivered a-1", "delivered a-2", "delivered a-3"]


async def test_a_retired_stream_ends_only_after_the_batches_in_flight_for_it(executors: Executors) -> None:
    process, dispatcher, session = _one_stream(executors, 2)
    async with _running(dispatcher, process):
        session.start("a-1")
        await process.wait_for_batches(1)
        session.retire()
        await asyncio.sleep(0.05)
        assert session.outbox.empty()  # not closed while its start is being written
        process.open(0)
        assert await _next(session) == StartAnswer("a-1", True, 1)
        assert await _next(session) is None  # then the stream ends


async def test_stop_returns_once_every_batch_in_flight_is_delivered(executors: Executors) -> None:
    process = GatedProcess()
    dispatcher = _dispatcher(process, executors, 2)
    first, second = _session(dispatcher, "w1"), _session(dispatcher, "w2")
    loop = asyncio.create_task(dispatcher.run())
    first.start("a-1")
    await process.wait_for_batches(1)
    second.start("b-1")
    await process.wait_for_batches(1)
    dispatcher.stop()
    await asyncio.sleep(0.05)
    assert not loop.done()
    process.open_all()
    await asyncio.wait_for(loop, 10)
    assert first.outbox.get_nowait() == StartAnswer("a-1", True, 1)
    assert second.outbox.get_nowait() == StartAnswer("b-1", True, 1)


async def test_work_that_commits_while_a_claim_is_in_flight_is_claimed_once_the_claim_returns(
    executors: Executors,
) -> None:
    """A claim in flight may read before an enqueue commits; the wake-up of that enqueue
    finds the session's credit out, so the claim is made again when the credit is back
    (else the job waits for the idle re-check, 30 s while every write is heard)."""
    process, dispatcher = _without_idle_rechecks(executors)
    session = _session(dispatcher, "w", ("tests.echo",))
    async with _running(dispatcher, process):
        session.add_credit(1)
        await process.wait_for_batches(1)
        assert process.claimed_for == [["w"]]
        dispatcher.jobs_available()  # an enqueue committed while the claim was being made
        await eventually(lambda: session.claim_may_be_stale, what="the loop to take that wake-up")
        process.open(0)  # the claim found nothing: it read before the commit
        await process.wait_for_batches(1)
        assert process.claimed_for == [["w"], ["w"]]
        assert (session.credit, session.reserved) == (0, 1)


async def test_a_claim_returning_without_a_wake_up_meanwhile_is_not_repeated(executors: Executors) -> None:
    process, dispatcher = _without_idle_rechecks(executors)
    session = _session(dispatcher, "w", ("tests.echo",))
    async with _running(dispatcher, process):
        session.add_credit(1)
        await process.wait_for_batches(1)
        process.open(0)
        await asyncio.sleep(0.05)  # room for a second claim, if one were made
        assert process.claimed_for == [["w"]]
        assert (session.credit, session.reserved) == (1, 0)


async def test_credit_arriving_while_a_claim_is_in_flight_does_not_repeat_that_claim(
    executors: Executors,
) -> None:
    """Only work becoming claimable makes a claim in flight stale; another session's
    credit does not (its own claim is made, the first is not repeated)."""
    process, dispatcher = _without_idle_rechecks(executors)
    first, second = _session(dispatcher, "w1", ("tests.echo",)), _session(dispatcher, "w2", ("tests.echo",))
    async with _running(dispatcher, process):
        first.add_credit(1)
        await process.wait_for_batches(1)
        second.add_credit(1)
        await process.wait_for_batches(1)
        assert process.claimed_for == [["w1"], ["w2"]]
        process.open(0)
        process.open(1)
        await asyncio.sleep(0.05)  # room for a repeated claim, if one were made
        assert process.claimed_for == [["w1"], ["w2"]]
        assert [(s.credit, s.reserved) for s in (first, second)] == [(1, 0), (1, 0)]


async def test_an_enqueue_written_beside_a_batch_without_claims_makes_no_claim_round_of_its_own(
    executors: Executors,
) -> None:
    """Only a claim can read before an enqueue commits: a batch of worker messages
    written alongside (a result's, at a light load) is no reason to claim again. Such a
    round held the worker's credit when the next enqueue came, whose own claim then
    had none to take its job with."""
    process, dispatcher = _without_idle_rechecks(executors)
    session = _session(dispatcher, "w", ("tests.echo",))
    async with _running(dispatcher, process):
        session.add_credit(1)
        await process.wait_for_batches(1)
        process.open(0)  # the queues are empty: the session is drained
        await eventually(lambda: session.credit == 1 and session.drained, what="the claim's answer")
        session.start("a-1")
        await process.wait_for_batches(1)  # batch 1: the start alone, still being written
        enqueued = asyncio.create_task(dispatcher.enqueue(EnqueueItem([]), {"default"}))
        await process.wait_for_batches(1)  # batch 2: the enqueue and its claim, beside it
        process.open(2)
        assert await asyncio.wait_for(enqueued, 10) == []
        process.open(1)
        session.start("a-2")
        await process.wait_for_batches(1)
        assert process.started == [[], ["a-1"], [], ["a-2"]]
        assert process.claimed_for == [["w"], [], ["w"], []]


async def test_a_claim_made_while_an_enqueue_is_written_is_made_again_after_its_commit(
    executors: Executors,
) -> None:
    """A claim that goes to the writer while an enqueue's batch is being written
    (PostgreSQL) may read before that enqueue commits: news of its queues, again."""
    process, dispatcher = _without_idle_rechecks(executors)
    session = _session(dispatcher, "w", ("tests.echo",))
    async with _running(dispatcher, process):
        enqueued = asyncio.create_task(dispatcher.enqueue(EnqueueItem([]), {"default"}))
        await process.wait_for_batches(1)  # batch 0: the enqueue (nobody has credit)
        session.add_credit(1)
        await process.wait_for_batches(1)  # batch 1: the claim, beside the enqueue
        process.open(1)  # it read before the enqueue committed: drained
        await eventually(lambda: session.drained, what="the claim's answer")
        process.open(0)
        assert await asyncio.wait_for(enqueued, 10) == []
        await process.wait_for_batches(1)
        assert process.claimed_for == [[], ["w"], ["w"]]


async def test_an_enqueue_while_a_claim_is_out_claims_in_its_own_batch_and_the_claim_is_not_repeated(
    executors: Executors,
) -> None:
    """A claim outside an enqueue's batch keeps one credit back: the enqueue that comes
    while it is out claims its job in its own transaction, and the claim out, which
    may have read before that enqueue, needs no second round (the enqueue's read after it)."""
    process, dispatcher = _without_idle_rechecks(executors)
    session = _session(dispatcher, "w", ("tests.echo",))
    async with _running(dispatcher, process):
        session.add_credit(8)
        await process.wait_for_batches(1)  # batch 0: a claim for all 8, which runs dry
        process.open(0)
        await eventually(lambda: session.ran_dry and session.credit == 8, what="its answer")
        dispatcher.jobs_available()  # work heard of (a retry, another replica's job)
        await process.wait_for_batches(1)  # batch 1: the claim, for 7 of the 8
        assert (session.credit, session.reserved) == (1, 7)
        enqueued = asyncio.create_task(dispatcher.enqueue(EnqueueItem([]), {"default"}))
        await process.wait_for_batches(1)  # batch 2: the enqueue and its claim, for the kept one
        assert process.claimed_for == [["w"], ["w"], ["w"]]
        process.open(2)
        assert await asyncio.wait_for(enqueued, 10) == []
        process.open(1)
        await eventually(lambda: session.reserved == 0, what="both claims answered")
        session.start("a-1")
        await process.wait_for_batches(1)
        assert process.started == [[], [], [], ["a-1"]]
        assert process.claimed_for == [["w"], ["w"], ["w"], []]
        assert (session.credit, session.drained) == (8, True)


def test_in_flight_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batches_in_flight must be 1 or more"):
        Dispatcher(
            GatedProcess(),
            CoordinatorConfig(),
            FakeClock(),
            Executors(postgres=False),
            lambda e: None,
            batches_in_flight=0,
        )
