"""A worker waiting for work gets a new job in the enqueue's own transaction: when the
Enqueue call returns, the job is already reserved for it, without a dispatcher round. The
queue's controls hold there too, and credit not used goes back to the session. The claim
goes out before the commit, and a start that comes back while the transaction waits for
it is written in that transaction (``dispatch.uncommitted``)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coordinator.dispatch import uncommitted
from coordinator.domain.states import JobState
from coordinator.process import RunningCoordinator
from coordinator.service.work import BatchAnswers, WorkBatch
from coordinator.store import StoreError, Tx
from coordinator.store.errors import WriteConflict
from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from tests.support import eventually
from worker_sdk import AsyncClient

WIRE = "chaos.task"


@pytest.fixture
async def running(database_url: str) -> AsyncIterator[RunningCoordinator]:
    async with coordinator_without_wake_ups(database_url) as coordinator:
        yield coordinator


async def _waiting_worker(running: RunningCoordinator) -> tuple[RawWorker, int]:
    """A worker with credit for two jobs and nothing claimable: it waits."""
    worker = RawWorker(running.target, "waiting-worker", [WIRE], capacity=2)
    await worker.next("welcome")
    worker.send(credit=worker_credit(2))
    dispatcher = running.app.dispatcher
    await eventually(lambda: sum(s.credit for s in dispatcher.sessions) == 2, what="the credit to arrive")
    # The credit's own claim round found nothing; from now on no round runs by itself.
    await eventually(lambda: dispatcher.claim_rounds >= 1, what="the credit's claim round")
    return worker, dispatcher.claim_rounds


def worker_credit(count: int) -> object:
    from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

    return pb.Credit(count=count)


async def test_an_enqueue_claims_for_a_waiting_worker_in_its_own_transaction(
    running: RunningCoordinator,
) -> None:
    worker, rounds = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            job_id = await client.enqueue(Task("at-once", 1))
            # Reserved when the call returns. The only session's credit was set aside for
            # the enqueue, so no dispatcher round can have claimed it meanwhile.
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RESERVED
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
            if not running.app.store.postgres:  # (PostgreSQL's NOTIFY wakes a round anyway)
                assert running.app.dispatcher.claim_rounds == rounds  # no round was needed
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (1, 0), what="one used, one back")
    finally:
        await worker.close()


async def test_a_paused_queue_is_not_claimed_by_an_enqueue_and_the_credit_comes_back(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            # A job due in an hour makes the queue known without anything to claim.
            await client.enqueue(Task("later", 1), run_at=datetime.now(UTC) + timedelta(hours=1))
            await client.pause_queue("default")
            job_id = await client.enqueue(Task("held", 1))
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.AVAILABLE
            [session] = running.app.dispatcher.sessions
            await eventually(lambda: (session.credit, session.reserved) == (2, 0), what="the credit back")
            await client.resume_queue("default")
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
    finally:
        await worker.close()


async def test_a_refused_enqueue_gives_the_reserved_credit_back(running: RunningCoordinator) -> None:
    worker, _ = await _waiting_worker(running)
    try:
        async with AsyncClient(running.target) as client:
            with pytest.raises(Exception, match="queue"):
                await client.enqueue(Task("bad", 1), queue="not a queue name!")
        [session] = running.app.dispatcher.sessions
        await eventually(lambda: (session.credit, session.reserved) == (2, 0), what="the credit back")
    finally:
        await worker.close()


def _pb() -> Any:
    from worker_sdk.proto.runwick.v1 import worker_service_pb2 as pb

    return pb


@contextlib.contextmanager
def _before_the_enqueues_commit(running: RunningCoordinator, action: Callable[[], None]) -> Iterator[None]:
    """Runs ``action`` on the writer just before the commit of the next enqueue that
    claims (once). Only that transaction's: another one (a count fold, a claim round)
    may commit meanwhile and must not take it."""
    dispatcher = running.app.dispatcher
    original_claiming, original_before_commit = dispatcher.claiming, Tx.before_commit
    claiming_transactions: set[int] = set()
    pending = [action]

    def claiming(reserved: Any, claim: Any) -> Callable[[Any], Any]:
        step = original_claiming(reserved, claim)

        def marked(tx: Any) -> Any:
            claiming_transactions.add(id(tx))
            return step(tx)

        return marked

    def before_commit(tx: Tx) -> None:
        if id(tx) in claiming_transactions and pending:
            pending.pop()()
        original_before_commit(tx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dispatcher, "claiming", claiming)
        patch.setattr(Tx, "before_commit", before_commit)
        yield


async def test_an_enqueues_claim_goes_out_before_its_commit_and_its_start_waits_for_the_commit(
    running: RunningCoordinator,
) -> None:
    """The worker has its claim while the enqueue's transaction is still open; the start
    it sends at once is held back, and granted once the commit is written."""
    worker, _ = await _waiting_worker(running)
    dispatcher = running.app.dispatcher
    committing, commit = threading.Event(), threading.Event()

    def hold_the_commit() -> None:
        committing.set()
        assert commit.wait(20), "the test never let the commit go"

    try:
        async with AsyncClient(running.target) as client:
            with _before_the_enqueues_commit(running, hold_the_commit):
                enqueue = asyncio.create_task(client.enqueue(Task("early", 1)))
                assignment: Any = await worker.next("assignment")
                assert not enqueue.done()
                # The claim goes out as it is made; the writer reaches the commit a
                # moment later (on PostgreSQL after sending the held writes).
                await eventually(committing.is_set, what="the writer at the commit")
                assert running.app.store.get_job(assignment.job_id) is None  # not committed yet
                worker.send(start=_pb().StartRequest(attempt_id=assignment.attempt_id))
                await eventually(lambda: dispatcher.uncommitted.held_back == 1, what="the start held back")
                commit.set()
                job_id = await enqueue
            assert job_id == assignment.job_id
            answer: Any = await worker.next("start_answer")
            assert (answer.attempt_id, answer.granted) == (assignment.attempt_id, True)
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
            assert (dispatcher.uncommitted.held_back, assignment.attempt_id in dispatcher.uncommitted) == (
                0,
                False,
            )
    finally:
        commit.set()
        await worker.close()


async def test_an_enqueue_tried_again_after_its_claims_went_out_refuses_their_start_and_claims_again(
    running: RunningCoordinator,
) -> None:
    """A transaction that conflicts is run again; the claims its first try handed out name
    attempts that never existed, so their start is refused, and the job the second try
    enqueued goes out in the next round, to the same worker, under a new attempt."""
    worker, _ = await _waiting_worker(running)

    def conflict() -> None:
        raise WriteConflict("a conflict made by the test")

    try:
        async with AsyncClient(running.target) as client:
            with _before_the_enqueues_commit(running, conflict):
                job_id = await client.enqueue(Task("retried", 1))
            first: Any = await worker.next("assignment")
            second: Any = await worker.next("assignment")  # the next round's, credit given back
            assert (second.job_id, first.job_id) == (job_id, job_id)
            assert second.attempt_id != first.attempt_id
            refused = await worker.start(first.attempt_id)
            assert (refused.granted, refused.reason) == (False, "unknown attempt")
            assert (await worker.start(second.attempt_id)).granted
            attempts = running.app.store.list_attempts(job_id)
            assert [a.id for a in attempts] == [second.attempt_id]
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        await worker.close()


async def test_an_enqueue_that_fails_after_its_claims_went_out_leaves_no_job_and_refuses_their_start(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)

    def fail() -> None:
        raise StoreError("a failure made by the test")

    try:
        async with AsyncClient(running.target) as client:
            enqueue_fails = pytest.raises(Exception, match=r"unavailable|failure")
            with _before_the_enqueues_commit(running, fail), enqueue_fails:
                await client.enqueue(Task("failed", 1))
        phantom: Any = await worker.next("assignment")
        refused = await worker.start(phantom.attempt_id)
        assert (refused.granted, refused.reason) == (False, "unknown attempt")
        assert running.app.store.get_job(phantom.job_id) is None
        # The worker holds the claim until its start is refused: that credit is its own
        # to give back, the other one is the session's again.
        [session] = running.app.dispatcher.sessions
        await eventually(lambda: (session.credit, session.reserved) == (1, 0), what="the unused credit back")
    finally:
        await worker.close()


@pytest.fixture
def long_wait_for_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Enqueues wait for their claims' starts as long as a test needs to send them."""
    monkeypatch.setattr(uncommitted, "JOIN_WAIT_S", 30.0)


def _starts_written_apart(running: RunningCoordinator, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The attempts whose start a worker batch (a transaction of its own) wrote."""
    dispatcher = running.app.dispatcher
    process, written = dispatcher.process, []

    def recording(batch: WorkBatch) -> BatchAnswers:
        written.extend(start.attempt_id for start in batch.starts)
        return process(batch)

    monkeypatch.setattr(dispatcher, "process", recording)
    return written


async def test_a_start_that_comes_while_the_enqueue_waits_commits_with_its_claim(
    running: RunningCoordinator, long_wait_for_starts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, _ = await _waiting_worker(running)
    written_apart = _starts_written_apart(running, monkeypatch)
    try:
        async with AsyncClient(running.target) as client:
            enqueue = asyncio.create_task(client.enqueue(Task("joined", 1)))
            assignment: Any = await worker.next("assignment")
            assert running.app.store.get_job(assignment.job_id) is None  # waiting for the start
            assert not enqueue.done()
            worker.send(start=_pb().StartRequest(attempt_id=assignment.attempt_id))
            job_id = await enqueue
            answer: Any = await worker.next("start_answer")
            assert (answer.attempt_id, answer.granted, answer.execution_number) == (
                assignment.attempt_id,
                True,
                1,
            )
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING and job.executions == 1
            [attempt] = running.app.store.list_attempts(job_id)
            assert attempt.started_at_ms is not None and attempt.execution_number == 1
            assert written_apart == []
            ack: Any = await worker.succeed(assignment.attempt_id)
            assert ack.status == _pb().ResultAck.STATUS_ACCEPTED
    finally:
        await worker.close()


async def test_a_start_from_a_stream_not_holding_the_claim_is_refused_by_the_enqueues_transaction(
    running: RunningCoordinator, long_wait_for_starts: None
) -> None:
    worker, _ = await _waiting_worker(running)
    intruder = RawWorker(running.target, "another-worker", [WIRE])
    await intruder.next("welcome")
    try:
        async with AsyncClient(running.target) as client:
            enqueue = asyncio.create_task(client.enqueue(Task("held", 1)))
            assignment: Any = await worker.next("assignment")
            # Taken by the transaction, which stops waiting, and refused at its commit.
            refused = await intruder.start(assignment.attempt_id)
            assert (refused.granted, refused.reason) == (False, "attempt held by another worker")
            job_id = await enqueue
            # The holder's own start then goes in a batch of its own.
            assert (await worker.start(assignment.attempt_id)).granted
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        await intruder.close()
        await worker.close()


async def _enqueue_taking_a_start(
    running: RunningCoordinator, worker: RawWorker, action: Callable[[], None]
) -> Any:
    """An enqueue whose transaction takes its claim's start and then runs ``action`` just
    before its commit. Returns the enqueue's job ID (or its error), the assignment, and
    the answer to the start."""
    async with AsyncClient(running.target) as client:
        with _before_the_enqueues_commit(running, action):
            enqueue = asyncio.create_task(client.enqueue(Task("taken", 1)))
            assignment: Any = await worker.next("assignment")
            worker.send(start=_pb().StartRequest(attempt_id=assignment.attempt_id))
            [outcome] = await asyncio.gather(enqueue, return_exceptions=True)
    answer: Any = await worker.next("start_answer")
    assert answer.attempt_id == assignment.attempt_id
    return outcome, assignment, answer


async def test_a_start_taken_by_an_enqueue_that_then_fails_is_refused(
    running: RunningCoordinator, long_wait_for_starts: None
) -> None:
    worker, _ = await _waiting_worker(running)

    def fail() -> None:
        raise StoreError("a failure made by the test")

    try:
        error, assignment, refused = await _enqueue_taking_a_start(running, worker, fail)
        assert isinstance(error, Exception) and re.search(r"unavailable|failure", str(error))
        assert (refused.granted, refused.reason) == (False, "unknown attempt")
        assert running.app.store.get_job(assignment.job_id) is None
    finally:
        await worker.close()


async def test_a_start_taken_by_an_enqueue_tried_again_is_refused_and_the_job_claimed_again(
    running: RunningCoordinator, long_wait_for_starts: None
) -> None:
    worker, _ = await _waiting_worker(running)

    def conflict() -> None:
        raise WriteConflict("a conflict made by the test")

    try:
        job_id, first, refused = await _enqueue_taking_a_start(running, worker, conflict)
        assert (refused.granted, refused.reason) == (False, "unknown attempt")
        second: Any = await worker.next("assignment")  # the next round's
        assert (second.job_id, first.job_id) == (job_id, job_id)
        assert (await worker.start(second.attempt_id)).granted
        assert [a.id for a in running.app.store.list_attempts(job_id)] == [second.attempt_id]
    finally:
        await worker.close()


async def test_a_worker_batch_ends_the_wait_for_starts_only_where_it_needs_the_single_writer(
    running: RunningCoordinator, long_wait_for_starts: None
) -> None:
    """SQLite has one writer: a batch that needs it ends an enqueue's wait for starts,
    which commits without them. PostgreSQL writes the batch on another connection
    meanwhile, and the enqueue keeps waiting."""
    worker, _ = await _waiting_worker(running)
    dispatcher = running.app.dispatcher
    other = RawWorker(running.target, "other-worker", [WIRE])
    await other.next("welcome")
    try:
        async with AsyncClient(running.target) as client:
            enqueue = asyncio.create_task(client.enqueue(Task("waiting", 1)))
            assignment: Any = await worker.next("assignment")
            rounds = dispatcher.claim_rounds
            other.send(credit=worker_credit(1))  # a claim round: a worker batch
            await eventually(lambda: dispatcher.claim_rounds > rounds, what="the other worker's batch")
            if dispatcher.batches_in_flight == 1:
                job_id = await enqueue  # committed without the start
                assert running.app.store.get_job(job_id) is not None
            else:
                assert not enqueue.done()
            assert (await worker.start(assignment.attempt_id)).granted
            job = running.app.store.get_job(await enqueue)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        await other.close()
        await worker.close()
