"""An enqueue's claims handed out before their commit (``dispatch.joined_starts``): the
wait for their starts on the writer's side, the offer of each start on the loop's, and
the dispatcher's part: which batch hands out early, that it holds every writer slot, that
a start taken by the transaction is answered with it and never becomes a batch of its
own, and that a stream whose claims went out on a try that did not commit starts over.

The writer is a stand-in for ``WorkerOps.process`` on the real writer threads
(``Executors``); ``tests/contract/test_joined_starts.py`` runs the store's side on both
engines."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import pytest

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerHello, WorkerSession
from coordinator.dispatch.deliveries import Assignments
from coordinator.dispatch.joined_starts import JoinedStarts
from coordinator.dispatch.writer_slots import WriterSlots
from coordinator.domain.clock import FakeClock
from coordinator.domain.records import NewJobSpec
from coordinator.service.executors import Executors
from coordinator.service.work import (
    AttemptMessage,
    BatchAnswers,
    Claimed,
    EnqueueItem,
    StartAnswer,
    WorkBatch,
)
from tests.unit.domain_doubles import JOB_RECORD

ATTEMPTS = ("0190f0a0-0000-7000-8000-000000000001", "0190f0a0-0000-7000-8000-000000000002")


def _claims(*attempt_ids: str) -> list[list[Claimed]]:
    return [[Claimed(JOB_RECORD, attempt_id, 60_000) for attempt_id in attempt_ids]]


def _session() -> WorkerSession:
    """A stream of its own: the wait only needs its identity."""
    executors = Executors(postgres=False)
    host = Dispatcher(lambda batch: BatchAnswers(), CoordinatorConfig(), FakeClock(), executors, print)
    session = host.open(WorkerHello("w", ("default",), ("noop",), 8, 60_000))
    executors.shutdown()
    return session


# -- the wait, on both sides ------------------------------------------------------------


async def test_the_wait_ends_as_soon_as_every_start_came() -> None:
    delivered: list[object] = []
    joining = JoinedStarts(asyncio.get_running_loop(), delivered.append, wait_s=30)
    session = _session()
    assert joining.hand_out(_claims(*ATTEMPTS))

    def gather() -> tuple[list[AttemptMessage], float]:
        began = time.monotonic()
        return joining.gather(), time.monotonic() - began

    waiting = asyncio.ensure_future(asyncio.to_thread(gather))
    await asyncio.sleep(0)
    assert delivered == [_claims(*ATTEMPTS)]  # handed to the loop at once
    assert joining.offer(session, ATTEMPTS[1]) and joining.offer(session, ATTEMPTS[0])
    taken, waited_s = await asyncio.wait_for(waiting, 10)
    assert [m.attempt_id for m in taken] == [ATTEMPTS[1], ATTEMPTS[0]]  # in arrival order
    assert joining.sessions == [session, session]
    assert waited_s < 30  # the last start ended the wait, not its bound
    assert not joining.offer(session, ATTEMPTS[0])  # the wait is over: the usual way


async def test_only_the_claims_own_attempts_are_taken() -> None:
    joining = JoinedStarts(asyncio.get_running_loop(), lambda claims: None, wait_s=0)
    joining.hand_out(_claims(ATTEMPTS[0]))
    assert not joining.offer(_session(), ATTEMPTS[1])
    assert joining.gather() == []


async def test_a_start_that_misses_the_bound_goes_the_usual_way() -> None:
    joining = JoinedStarts(asyncio.get_running_loop(), lambda claims: None, wait_s=0.01)
    joining.hand_out(_claims(ATTEMPTS[0]))
    assert joining.gather() == []
    assert not joining.offer(_session(), ATTEMPTS[0])


async def test_stop_ends_the_wait_and_before_the_hand_out_cancels_it() -> None:
    delivered: list[object] = []
    joining = JoinedStarts(asyncio.get_running_loop(), delivered.append, wait_s=30)
    joining.hand_out(_claims(ATTEMPTS[0]))
    threading.Timer(0.05, joining.stop).start()
    began = time.monotonic()
    assert joining.gather() == []
    assert time.monotonic() - began < 30
    stopped_first = JoinedStarts(asyncio.get_running_loop(), delivered.append, wait_s=30)
    stopped_first.stop()
    assert not stopped_first.hand_out(_claims(ATTEMPTS[1]))  # the claims go after the commit
    assert not stopped_first.handed_out and stopped_first.gather() == []


async def test_a_second_try_hands_nothing_out_and_gets_the_first_tries_starts_again() -> None:
    joining = JoinedStarts(asyncio.get_running_loop(), lambda claims: None, wait_s=0)
    joining.hand_out(_claims(ATTEMPTS[0]))
    assert joining.offer(_session(), ATTEMPTS[0])
    first = joining.gather()
    assert not joining.hand_out(_claims(ATTEMPTS[1]))
    assert joining.handed_out
    assert joining.gather() == first


async def test_a_batch_that_hands_out_early_holds_every_writer_slot() -> None:
    slots = WriterSlots(2)
    loop = asyncio.get_running_loop()
    before: asyncio.Future[None] = loop.create_future()
    joined: asyncio.Future[None] = loop.create_future()

    async def deliver(pending: asyncio.Future[None]) -> None:
        await pending

    first = slots.launch(before, deliver)  # a batch already on the writer may finish
    written = slots.launch(joined, deliver, exclusive=True)
    assert slots.full
    before.set_result(None)
    await first
    assert slots.full  # no other batch goes to the writer before the joined one answers
    joined.set_result(None)
    await written
    assert not slots.full and slots.writing == 0


# -- the dispatcher -------------------------------------------------------------------


class JoiningWriter:
    """Plays ``WorkerOps.process``: claims the enqueued job for the first claim of an
    enqueue's batch (the queue is empty otherwise), hands it out early when the batch
    has a join, waits for its start and grants it; ``lose`` answers as a transaction run
    again would (its claims not the ones handed out)."""

    def __init__(self, *, lose: bool = False) -> None:
        self.lose = lose
        self.batches: list[WorkBatch] = []

    def __call__(self, batch: WorkBatch) -> BatchAnswers:
        self.batches.append(batch)
        claims: list[list[Claimed]] = [[] for _ in batch.claims]
        if batch.enqueues and claims:
            claims[0] = [Claimed(JOB_RECORD, ATTEMPTS[0], 60_000)]
        answers = BatchAnswers(
            starts=[StartAnswer(m.attempt_id, True, 1) for m in batch.starts],
            claims=claims,
            drained=[True for _ in batch.claims],
            enqueued=[[] for _ in batch.enqueues],
        )
        if batch.joining is not None:
            answers.handed_out_early = batch.joining.hand_out(claims) and not self.lose
            starts = batch.joining.gather()
            answers.joined_starts = [StartAnswer(m.attempt_id, not self.lose, 1) for m in starts]
        return answers


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    pool = Executors(postgres=True)
    yield pool
    pool.shutdown()


async def _with_a_worker(
    writer: JoiningWriter, executors: Executors, *, join_start_wait_ms: float = 2.0
) -> tuple[Dispatcher, WorkerSession, asyncio.Task[None]]:
    config = CoordinatorConfig(
        join_start_wait_ms=join_start_wait_ms, idle_interval_s=3600, idle_recheck_interval_s=3600
    )
    dispatcher = Dispatcher(writer, config, FakeClock(), executors, lambda e: None, batches_in_flight=2)
    dispatcher.hears_all(True)
    session = dispatcher.open(WorkerHello("w", ("default",), ("noop",), 8, 60_000))
    loop = asyncio.create_task(dispatcher.run())
    dispatcher.add_credit(session, 8)
    return dispatcher, session, loop


async def _next(session: WorkerSession) -> object:
    return await asyncio.wait_for(session.outbox.get(), 10)


def _enqueue(dispatcher: Dispatcher) -> asyncio.Task[object]:
    item = EnqueueItem([NewJobSpec("w", b"{}", queue="default")])
    return asyncio.ensure_future(dispatcher.enqueue(item, {"default"}))


async def _answering_starts(session: WorkerSession, joined: asyncio.Event) -> None:
    """The worker: starts every assignment it gets."""
    assignment = await _next(session)
    assert isinstance(assignment, Assignments)
    for claimed in assignment.claimed:
        session.start(claimed.attempt_id)
    joined.set()


async def test_an_enqueues_claim_goes_out_before_its_commit_and_its_start_is_written_with_it(
    executors: Executors,
) -> None:
    writer = JoiningWriter()
    dispatcher, session, loop = await _with_a_worker(writer, executors)
    joined = asyncio.Event()
    worker = asyncio.create_task(_answering_starts(session, joined))
    await asyncio.wait_for(_enqueue(dispatcher), 10)
    await worker
    grant = await _next(session)
    assert grant == StartAnswer(ATTEMPTS[0], True, 1)
    # The start never became a batch of its own: one batch wrote the enqueue, the claim
    # and the start, and it held both writer slots.
    assert [b.enqueues and b.joining is not None for b in writer.batches if b.enqueues] == [True]
    assert not any(b.starts for b in writer.batches)
    assert dispatcher.slots.writing == 0
    dispatcher.stop()
    await asyncio.wait_for(loop, 10)


async def test_without_a_wait_claims_go_out_after_the_commit(executors: Executors) -> None:
    writer = JoiningWriter()
    dispatcher, session, loop = await _with_a_worker(writer, executors, join_start_wait_ms=0)
    await asyncio.wait_for(_enqueue(dispatcher), 10)
    assignment = await _next(session)
    assert isinstance(assignment, Assignments)
    session.start(ATTEMPTS[0])
    assert await _next(session) == StartAnswer(ATTEMPTS[0], True, 1)
    assert all(b.joining is None for b in writer.batches)
    assert [m.attempt_id for b in writer.batches for m in b.starts] == [ATTEMPTS[0]]
    dispatcher.stop()
    await asyncio.wait_for(loop, 10)


async def test_a_stream_whose_claims_went_out_on_a_try_that_did_not_commit_starts_over(
    executors: Executors,
) -> None:
    writer = JoiningWriter(lose=True)
    dispatcher, session, loop = await _with_a_worker(writer, executors)
    joined = asyncio.Event()
    worker = asyncio.create_task(_answering_starts(session, joined))
    await asyncio.wait_for(_enqueue(dispatcher), 10)
    await worker
    delivered = [await _next(session) for _ in range(3)]
    # The refused start, the claims of the try that committed (after it), then the end of
    # the stream: the worker reconnects and says its credit again.
    assert delivered[0] == StartAnswer(ATTEMPTS[0], False, 1)
    assert isinstance(delivered[1], Assignments)
    assert delivered[2] is None
    dispatcher.stop()
    await asyncio.wait_for(loop, 10)
