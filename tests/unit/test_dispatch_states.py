"""The dispatcher's wake-ups and loop states, as docs/internals.md draws them: what each
wake-up asks of the next batch (``dispatch.wakeups``), the loop's transitions
(``LoopState``) and a session's credit through a claim (``dispatch.claims``). A fake
clock; no database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from domain_doubles import JOB_RECORD

from coordinator.config import CoordinatorConfig
from coordinator.dispatch import Dispatcher, WorkerHello, claims
from coordinator.dispatch.dispatcher import TRANSITIONS, LoopState
from coordinator.dispatch.wakeups import CLAIMS_AFTER, ClaimNews, Wake, Wakeups
from coordinator.domain.clock import FakeClock
from coordinator.service.executors import Executors
from coordinator.service.work import BatchAnswers, Claimed, WorkBatch
from tests.support import eventually

CONFIG = CoordinatorConfig(idle_interval_s=3600, idle_recheck_interval_s=3600)


def _settled(wakeups: Wakeups) -> Wakeups:
    """``wakeups`` with the first claim round (every new loop claims) taken."""
    assert wakeups.take_claim_news() == ClaimNews(heard_of_work=False, queues=frozenset())
    return wakeups


def test_every_reason_to_wake_has_a_row_in_the_table() -> None:
    assert set(CLAIMS_AFTER) == set(Wake)


@pytest.mark.parametrize("reason", list(Wake))
async def test_each_wake_up_asks_of_the_next_batch_what_its_row_says(reason: Wake) -> None:
    wakeups = _settled(Wakeups(CONFIG, FakeClock()))
    wakeups.wake(reason)
    await asyncio.wait_for(wakeups.sleep(), 5)  # woken at once, whatever the reason
    news = wakeups.take_claim_news()
    row = CLAIMS_AFTER[reason]
    assert (news is not None) == row.claim
    assert (news is not None and news.heard_of_work) == row.news_of_work
    assert wakeups.take_claim_news() is None  # taken once


async def test_work_heard_of_in_queues_names_them_and_anywhere_names_none() -> None:
    wakeups = _settled(Wakeups(CONFIG, FakeClock()))
    wakeups.wake(Wake.WORK, "mail")
    wakeups.wake(Wake.WORK, "billing")
    assert wakeups.take_claim_news() == ClaimNews(heard_of_work=True, queues=frozenset({"mail", "billing"}))
    wakeups.wake(Wake.WORK, "mail")
    wakeups.wake(Wake.WORK)
    assert wakeups.take_claim_news() == ClaimNews(heard_of_work=True, queues=None)


async def test_a_due_job_wakes_the_loop_as_news_of_work_anywhere_when_its_time_comes() -> None:
    clock = FakeClock()
    wakeups = _settled(Wakeups(CONFIG, clock))
    wakeups.due(clock.now_ms() + 60_000)
    await asyncio.wait_for(wakeups.sleep(), 5)  # the earlier due time woke it: not yet due
    assert wakeups.take_claim_news() is None
    clock.advance(60_000)
    await asyncio.wait_for(wakeups.sleep(), 5)  # due now: no wait
    assert wakeups.take_claim_news() == ClaimNews(heard_of_work=True, queues=None)


def test_the_loop_states_form_one_path_to_stopped() -> None:
    assert set(TRANSITIONS) == set(LoopState)
    reachable, frontier = {LoopState.IDLE}, [LoopState.IDLE]
    while frontier:
        for following in TRANSITIONS[frontier.pop()]:
            if following not in reachable:
                reachable.add(following)
                frontier.append(following)
    assert reachable == set(LoopState)
    assert TRANSITIONS[LoopState.STOPPED] == frozenset()


@pytest.fixture
async def executors() -> AsyncIterator[Executors]:
    pool = Executors(postgres=False)
    yield pool
    pool.shutdown()


def _nothing_claimable(batch: WorkBatch) -> BatchAnswers:
    return BatchAnswers(claims=[[] for _ in batch.claims], drained=[True for _ in batch.claims])


async def test_the_loop_goes_idle_after_each_batch_and_stopped_after_stop(executors: Executors) -> None:
    dispatcher = Dispatcher(_nothing_claimable, CONFIG, FakeClock(), executors, lambda e: None)
    session = dispatcher.open(WorkerHello("w", ("default",), ("noop",), 2, 60_000))
    assert dispatcher.state is LoopState.IDLE
    loop = asyncio.create_task(dispatcher.run())
    try:
        session.add_credit(2)
        await eventually(lambda: dispatcher.claim_rounds == 1, what="the credit's claim round")
        await eventually(lambda: dispatcher.state is LoopState.IDLE, what="the loop idle again")
        # The claim found the queue empty: the credit is back, and the session waits for news.
        assert (session.credit, session.reserved, session.drained) == (2, 0, True)
    finally:
        dispatcher.stop()
        await asyncio.wait_for(loop, 10)
    assert dispatcher.state is LoopState.STOPPED


async def test_a_stopping_dispatcher_takes_no_enqueues_and_readers_wait(executors: Executors) -> None:
    dispatcher = Dispatcher(_nothing_claimable, CONFIG, FakeClock(), executors, lambda e: None)
    session = dispatcher.open(WorkerHello("w", ("default",), ("noop",), 2, 60_000))
    session.add_credit(2)
    assert not dispatcher.batch_full()
    dispatcher.stop()
    assert not dispatcher.takes_calls and dispatcher.batch_full() and dispatcher.draining
    assert (session.credit, session.reserved) == (2, 0)


def test_a_claim_moves_credit_to_reserved_and_its_answer_gives_back_what_it_did_not_use() -> None:
    dispatcher = Dispatcher(
        _nothing_claimable, CONFIG, FakeClock(), Executors(postgres=False), lambda e: None
    )
    session = dispatcher.open(WorkerHello("w", ("default",), ("noop",), 3, 60_000))
    claims.add_credit(session, 5)  # never past the capacity
    assert session.credit == 3
    request = claims.reserve(session, claims.claim_count(session, with_enqueues=True))
    assert (request.count, session.credit, session.reserved) == (3, 0, 3)
    claims.add_credit(session, 1)  # none free while the claim is out
    claims.hear_of_work([session], frozenset({"default"}))
    assert session.claim_may_be_stale
    refill = claims.hand_back(
        [session],
        [request],
        _nothing_claimable(WorkBatch(claims=[request])),
        connected={session},
        bounds=CONFIG.bounds,
    )
    # Work came while the claim was out, which may have read too early: claim again.
    assert refill and (session.credit, session.reserved, session.drained) == (3, 0, False)
    assert not session.claim_may_be_stale


def test_a_claim_outside_an_enqueues_batch_keeps_one_credit_for_the_next_enqueue() -> None:
    """At a light load the next enqueue's own claim takes its job: a claim made after a
    result (or made again) leaves it the credit to do so, as long as the worker has more
    than one slot; a worker with one slot free and no claim out still claims it."""
    dispatcher = Dispatcher(
        _nothing_claimable, CONFIG, FakeClock(), Executors(postgres=False), lambda e: None
    )
    session = dispatcher.open(WorkerHello("w", ("default",), ("noop",), 4, 60_000))
    claims.add_credit(session, 4)
    assert claims.claim_count(session, with_enqueues=False) == 4  # no claim ran dry yet
    session.ran_dry = True  # as a claim answered with fewer jobs than it asked leaves it
    assert claims.claim_count(session, with_enqueues=False) == 3
    first = claims.reserve(session, 3)
    assert (session.credit, session.reserved) == (1, 3)
    assert claims.claim_count(session, with_enqueues=False) == 0  # the kept one stays kept
    assert claims.claim_count(session, with_enqueues=True) == 1
    claims.hear_of_work([session], frozenset({"default"}))
    assert session.claim_may_be_stale
    second = claims.reserve(session, 1)  # the enqueue's claim reads after the first one
    assert not session.claim_may_be_stale
    answers = _nothing_claimable(WorkBatch(claims=[first, second]))
    refill = claims.hand_back(
        [session, session], [first, second], answers, connected={session}, bounds=CONFIG.bounds
    )
    assert not refill and (session.credit, session.reserved, session.drained) == (4, 0, True)
    lone = dispatcher.open(WorkerHello("w1", ("default",), ("noop",), 1, 60_000))
    claims.add_credit(lone, 1)
    assert claims.claim_count(lone, with_enqueues=False) == 1


def test_a_claim_that_took_all_it_asked_for_keeps_nothing_back_next_time() -> None:
    """While claims take all they ask for (a backlog), every claim takes all the credit:
    one kept back would cost a claim round of its own after each of them."""
    dispatcher = Dispatcher(
        _nothing_claimable, CONFIG, FakeClock(), Executors(postgres=False), lambda e: None
    )
    session = dispatcher.open(WorkerHello("w", ("default",), ("noop",), 8, 60_000))
    claims.add_credit(session, 8)
    session.ran_dry = True
    request = claims.reserve(session, claims.claim_count(session, with_enqueues=False))
    assert request.count == 7
    claimed = [Claimed(JOB_RECORD, f"a-{n}", 60_000) for n in range(7)]
    answers = BatchAnswers(claims=[claimed], drained=[False])
    refill = claims.hand_back([session], [request], answers, connected=set(), bounds=CONFIG.bounds)
    assert refill and not session.ran_dry
    assert claims.claim_count(session, with_enqueues=False) == session.credit == 1
