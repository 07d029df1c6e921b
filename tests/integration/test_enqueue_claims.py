"""A worker waiting for work gets a new job in the enqueue's own transaction (the writer's
batch the call is an item of): when the Enqueue call returns, the job is already reserved
for it, without another dispatcher round. The
queue's controls hold there too, and credit not used goes back to the session. At a light
load the claims go out before the transaction commits, and a start that comes back in
time is written in it (``dispatch.joined_starts``), but nothing is granted before the
commit: a transaction tried again refuses the starts of its first try's claims, and a
stream whose claims went out on a try that did not commit (or on a failed one) starts
over."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coordinator.domain.states import JobState
from coordinator.process import RunningCoordinator
from coordinator.service import batch as batch_module
from coordinator.store import StoreError, Tx
from coordinator.store.errors import WriteConflict
from tests.chaos.jobs import Task
from tests.integration.conftest import coordinator_without_wake_ups
from tests.integration.rawstream import RawWorker
from tests.support import eventually
from worker_sdk import AsyncClient, JobContext, Worker
from worker_sdk import JobState as SdkJobState

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
            # Reserved when the call returns: the batch that wrote the enqueue claimed it.
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RESERVED
            assignment = await worker.next("assignment")
            assert assignment.job_id == job_id  # type: ignore[attr-defined]
            if not running.app.store.postgres:  # (PostgreSQL's NOTIFY wakes a round anyway)
                assert running.app.dispatcher.claim_rounds == rounds + 1  # that batch's, no other
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
    """Runs ``action`` on the writer just before the commit of the next batch that
    writes an enqueue (once). Only that transaction's: another one (a count fold, a claim
    round) may commit meanwhile and must not take it."""
    original_write_items, original_before_commit = batch_module.write_items, Tx.before_commit
    claiming_transactions: set[int] = set()
    pending = [action]

    def write_items(tx: Tx, checked: Any, now_ms: int) -> Any:
        claiming_transactions.add(id(tx))
        return original_write_items(tx, checked, now_ms)

    def before_commit(tx: Tx) -> None:
        if id(tx) in claiming_transactions and pending:
            pending.pop()()
        original_before_commit(tx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch_module, "write_items", write_items)
        patch.setattr(Tx, "before_commit", before_commit)
        yield


def _assignments_made(running: RunningCoordinator, committed: threading.Event) -> list[bool]:
    """For each assignment the only session is handed, whether ``committed`` was set by
    then."""
    [session] = running.app.dispatcher.sessions
    assign, seen = session.assign, []

    def recording(claimed: Any) -> None:
        seen.append(committed.is_set())
        assign(claimed)

    session.assign = recording  # type: ignore[method-assign]
    return seen


def _deliveries_made(running: RunningCoordinator, committed: threading.Event) -> list[tuple[str, bool]]:
    """For each delivery to the only session (an answer, a notice), its kind and whether
    ``committed`` was set by then."""
    [session] = running.app.dispatcher.sessions
    deliver, seen = session.deliver, []

    def recording(delivery: Any) -> None:
        seen.append((type(delivery).__name__, committed.is_set()))
        deliver(delivery)

    session.deliver = recording  # type: ignore[method-assign]
    return seen


async def test_an_enqueues_claim_goes_out_before_its_commit_and_its_start_is_granted_only_after_it(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    committing, commit = threading.Event(), threading.Event()
    made = _assignments_made(running, commit)
    delivered = _deliveries_made(running, commit)

    def hold_the_commit() -> None:
        committing.set()
        assert commit.wait(20), "the test never let the commit go"

    try:
        async with AsyncClient(running.target) as client:
            with _before_the_enqueues_commit(running, hold_the_commit):
                enqueue = asyncio.create_task(client.enqueue(Task("early", 1)))
                assignment: Any = await worker.next("assignment")
                assert made == [False]  # out before the commit
                worker.send(start=_pb().StartRequest(attempt_id=assignment.attempt_id))
                await eventually(committing.is_set, what="the writer at the commit")
                await asyncio.sleep(0.2)  # the start had time to be answered, were it allowed
                assert delivered == [] and not enqueue.done()
                commit.set()
                job_id = await enqueue
            answer: Any = await worker.next("start_answer")
            assert (assignment.job_id, answer.granted, answer.execution_number) == (job_id, True, 1)
            assert delivered == [("StartAnswer", True)]
            job = running.app.store.get_job(job_id)
            assert job is not None and (job.state, job.executions) == (JobState.RUNNING, 1)
    finally:
        commit.set()
        await worker.close()


async def test_a_real_workers_start_joins_its_claims_transaction(database_url: str) -> None:
    """With a wait long enough, an SDK worker's start is written with the claim: the job
    runs after one write transaction, and the start is granted once."""
    async with coordinator_without_wake_ups(database_url, join_start_wait_ms=10_000) as running:
        worker = Worker(running.target, concurrency=1)
        ran: list[int] = []

        @worker.handler(Task)
        async def run(payload: Task, ctx: JobContext) -> None:
            ran.append(ctx.execution_number)

        async with AsyncClient(running.target) as client, worker:
            dispatcher = running.app.dispatcher
            await eventually(lambda: dispatcher.claim_rounds >= 1, what="the first credit's claim round")
            job_id = await client.enqueue(Task("joined", 0))
            info = await client.wait(job_id, timedelta(seconds=10))
            assert info.state is SdkJobState.SUCCEEDED
            assert dispatcher.joins.starts_joined == 1 and ran == [1]
            [attempt] = running.app.store.list_attempts(job_id)
            assert attempt.execution_number == 1 and attempt.started_at_ms is not None


async def test_an_enqueue_tried_again_after_its_claims_went_out_refuses_their_starts(
    running: RunningCoordinator,
) -> None:
    """A transaction that conflicts is run again whole, its claims with it, and hands
    nothing out before its commit: the worker gets the first try's claim (early), then
    the committed try's, then its stream ends (its credit no longer matches). The first
    try's attempt never existed; the committed one's is the worker's to start."""
    worker, _ = await _waiting_worker(running)

    def conflict() -> None:
        raise WriteConflict("a conflict made by the test")

    try:
        async with AsyncClient(running.target) as client:
            with _before_the_enqueues_commit(running, conflict):
                job_id = await client.enqueue(Task("retried", 1))
            first: Any = await worker.next("assignment")
            second: Any = await worker.next("assignment")
            assert first.job_id == second.job_id == job_id and first.attempt_id != second.attempt_id
            with pytest.raises(EOFError):
                await worker.read()
            assert [a.id for a in running.app.store.list_attempts(job_id)] == [second.attempt_id]
            again = RawWorker(running.target, "waiting-worker", [WIRE], capacity=2)
            try:
                await again.next("welcome")
                refused = await again.start(first.attempt_id)
                assert (refused.granted, refused.reason) == (False, "unknown attempt")
                granted = await again.start(second.attempt_id)
                assert (granted.granted, granted.execution_number) == (True, 1)
            finally:
                await again.close()
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        await worker.close()


async def test_an_enqueue_that_fails_writes_nothing_and_its_streams_start_over(
    running: RunningCoordinator,
) -> None:
    """The enqueue's transaction is a worker batch: when it fails, what it claimed never
    existed (the claim went out before the commit), and the streams it claimed for close
    as for any failed batch (their workers reconnect); a worker waiting then gets the
    next job."""
    worker, _ = await _waiting_worker(running)
    made = _assignments_made(running, threading.Event())

    def fail() -> None:
        raise StoreError("a failure made by the test")

    try:
        async with AsyncClient(running.target) as client:
            enqueue_fails = pytest.raises(Exception, match=r"unavailable|failure")
            with _before_the_enqueues_commit(running, fail), enqueue_fails:
                await client.enqueue(Task("failed", 1))
            assert made == [False]
            await eventually(lambda: not running.app.dispatcher.sessions, what="the stream closed")
            assert (
                running.app.store.list_jobs(queue=None, state=None, wire_name=None, after_id=None, limit=5)
                == []
            )
            again, _ = await _waiting_worker(running)
            try:
                job_id = await client.enqueue(Task("next", 1))
                assignment: Any = await again.next("assignment")
                assert assignment.job_id == job_id
            finally:
                await again.close()
    finally:
        await worker.close()


async def test_a_start_of_an_enqueues_claim_from_another_stream_is_refused(
    running: RunningCoordinator,
) -> None:
    worker, _ = await _waiting_worker(running)
    intruder = RawWorker(running.target, "another-worker", [WIRE])
    await intruder.next("welcome")
    try:
        async with AsyncClient(running.target) as client:
            job_id = await client.enqueue(Task("held", 1))
            assignment: Any = await worker.next("assignment")
            refused = await intruder.start(assignment.attempt_id)
            assert (refused.granted, refused.reason) == (False, "attempt held by another worker")
            assert (await worker.start(assignment.attempt_id)).granted
            job = running.app.store.get_job(job_id)
            assert job is not None and job.state is JobState.RUNNING
    finally:
        await intruder.close()
        await worker.close()
